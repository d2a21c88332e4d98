package fencing

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
)

// nodeBuilder builds Nodes for the decision table.
type nodeBuilder struct{ n *v1.Node }

func newNode() nodeBuilder {
	return nodeBuilder{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}
}

func (b nodeBuilder) taint(key, value string, effect v1.TaintEffect) nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, v1.Taint{Key: key, Value: value, Effect: effect})
	return b
}

func (b nodeBuilder) condition(t string, s v1.ConditionStatus) nodeBuilder {
	b.n.Status.Conditions = append(b.n.Status.Conditions, v1.NodeCondition{Type: v1.NodeConditionType(t), Status: s})
	return b
}

func (b nodeBuilder) ready(s v1.ConditionStatus) nodeBuilder { return b.condition("Ready", s) }

func csiDriver(safe string) *storagev1.CSIDriver {
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "mock.fenceline.io"}}
	if safe != "" {
		d.Annotations = map[string]string{names.SafeDetachAnnotation: safe}
	}
	return d
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want Decision
	}{
		{"node gone", Input{Node: nil, DriverCanFence: true}, Decision{Mode: ModePlain}},
		{"healthy node", Input{Node: newNode().ready(v1.ConditionTrue).n, DriverCanFence: true}, Decision{Mode: ModePlain}},
		{"not ready without taints is plain", Input{Node: newNode().ready(v1.ConditionUnknown).n, DriverCanFence: true}, Decision{Mode: ModePlain}},
		{"out-of-service NoExecute", Input{Node: newNode().ready(v1.ConditionUnknown).taint(names.OutOfServiceTaint, "nodeshutdown", v1.TaintEffectNoExecute).n, DriverCanFence: true},
			Decision{Reason: ReasonOutOfService, Mode: ModeFenced}},
		{"out-of-service any value and effect, even Ready", Input{Node: newNode().ready(v1.ConditionTrue).taint(names.OutOfServiceTaint, "", v1.TaintEffectNoSchedule).n, DriverCanFence: true},
			Decision{Reason: ReasonOutOfService, Mode: ModeFenced}},
		{"out-of-service, driver cannot fence", Input{Node: newNode().taint(names.OutOfServiceTaint, "x", v1.TaintEffectNoExecute).n},
			Decision{Reason: ReasonOutOfService, Mode: ModePlain, Unsupported: true}},
		{"safe-detach", Input{Node: newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, Driver: csiDriver("true"), DriverCanFence: true},
			Decision{Reason: ReasonSafeDetach, Mode: ModeFenced}},
		{"safe-detach with Ready condition missing", Input{Node: newNode().taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, Driver: csiDriver("true"), DriverCanFence: true},
			Decision{Reason: ReasonSafeDetach, Mode: ModeFenced}},
		{"quarantine but driver not opted in", Input{Node: newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, Driver: csiDriver(""), DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"quarantine, annotation not exactly true", Input{Node: newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, Driver: csiDriver("yes"), DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"quarantine, no CSIDriver object", Input{Node: newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"quarantine on Ready node", Input{Node: newNode().ready(v1.ConditionTrue).taint(names.QuarantineTaint, "", v1.TaintEffectNoSchedule).n, Driver: csiDriver("true"), DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"safe-detach opted in but no quarantine taint", Input{Node: newNode().ready(v1.ConditionFalse).n, Driver: csiDriver("true"), DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"force-eviction on NotReady node", Input{Node: newNode().ready(v1.ConditionUnknown).taint(names.ForceEvictionTaint, "", v1.TaintEffectNoExecute).n, DriverCanFence: true},
			Decision{Reason: ReasonForceEviction, Mode: ModeFenced}},
		{"force-eviction on Ready node", Input{Node: newNode().ready(v1.ConditionTrue).taint(names.ForceEvictionTaint, "", v1.TaintEffectNoExecute).n, DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"force-eviction, driver cannot fence", Input{Node: newNode().ready(v1.ConditionFalse).taint(names.ForceEvictionTaint, "", v1.TaintEffectNoExecute).n},
			Decision{Reason: ReasonForceEviction, Mode: ModePlain, Unsupported: true}},
		{"FencingComplete=True", Input{Node: newNode().ready(v1.ConditionUnknown).condition(names.FencingCompleteCondition, v1.ConditionTrue).n, DriverCanFence: true},
			Decision{Reason: ReasonFenced, Mode: ModeFenced}},
		{"FencingComplete=False", Input{Node: newNode().ready(v1.ConditionUnknown).condition(names.FencingCompleteCondition, v1.ConditionFalse).n, DriverCanFence: true},
			Decision{Mode: ModePlain}},
		{"several reasons report out-of-service first", Input{Node: newNode().ready(v1.ConditionFalse).
			taint(names.ForceEvictionTaint, "", v1.TaintEffectNoExecute).
			taint(names.OutOfServiceTaint, "nodeshutdown", v1.TaintEffectNoExecute).
			condition(names.FencingCompleteCondition, v1.ConditionTrue).n, DriverCanFence: true},
			Decision{Reason: ReasonOutOfService, Mode: ModeFenced}},
		{"unrelated taints are ignored", Input{Node: newNode().ready(v1.ConditionUnknown).
			taint("node.kubernetes.io/unreachable", "", v1.TaintEffectNoExecute).
			taint("node.kubernetes.io/not-ready", "", v1.TaintEffectNoExecute).n, DriverCanFence: true},
			Decision{Mode: ModePlain}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.in); got != tc.want {
				t.Errorf("Decide() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
