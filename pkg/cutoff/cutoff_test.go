package cutoff

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
)

type nodeBuilder struct{ n *v1.Node }

func newNode() nodeBuilder {
	return nodeBuilder{&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}
}

func (b nodeBuilder) taint(key string, effect v1.TaintEffect) nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, v1.Taint{Key: key, Effect: effect})
	return b
}

func (b nodeBuilder) condition(t string, s v1.ConditionStatus) nodeBuilder {
	b.n.Status.Conditions = append(b.n.Status.Conditions, v1.NodeCondition{Type: v1.NodeConditionType(t), Status: s})
	return b
}

func (b nodeBuilder) ready(s v1.ConditionStatus) nodeBuilder { return b.condition("Ready", s) }

func TestNodeReason(t *testing.T) {
	tests := []struct {
		name string
		node *v1.Node
		safe bool
		want Reason
	}{
		{"node gone", nil, true, ReasonNodeGone},
		{"healthy", newNode().ready(v1.ConditionTrue).n, true, ReasonNone},
		{"not ready alone", newNode().ready(v1.ConditionUnknown).n, true, ReasonNone},
		{"out-of-service any effect, even Ready", newNode().ready(v1.ConditionTrue).taint(names.OutOfServiceTaint, v1.TaintEffectNoSchedule).n, false, ReasonOutOfService},
		{"quarantine NoSchedule, opted in", newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, v1.TaintEffectNoSchedule).n, true, ReasonSafeDetach},
		{"quarantine without Ready condition", newNode().taint(names.QuarantineTaint, v1.TaintEffectNoSchedule).n, true, ReasonSafeDetach},
		{"quarantine, not opted in", newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, v1.TaintEffectNoSchedule).n, false, ReasonNone},
		{"quarantine key with foreign effect", newNode().ready(v1.ConditionFalse).taint(names.QuarantineTaint, v1.TaintEffectNoExecute).n, true, ReasonNone},
		{"quarantine on Ready node", newNode().ready(v1.ConditionTrue).taint(names.QuarantineTaint, v1.TaintEffectNoSchedule).n, true, ReasonNone},
		{"force-eviction NoExecute on NotReady", newNode().ready(v1.ConditionUnknown).taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute).n, false, ReasonForceEviction},
		{"force-eviction key with NoSchedule", newNode().ready(v1.ConditionUnknown).taint(names.ForceEvictionTaint, v1.TaintEffectNoSchedule).n, false, ReasonNone},
		{"force-eviction on Ready node", newNode().ready(v1.ConditionTrue).taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute).n, false, ReasonNone},
		{"FencingComplete=True", newNode().ready(v1.ConditionUnknown).condition(names.FencingCompleteCondition, v1.ConditionTrue).n, false, ReasonFenced},
		{"FencingComplete=False", newNode().ready(v1.ConditionUnknown).condition(names.FencingCompleteCondition, v1.ConditionFalse).n, false, ReasonNone},
		{"order: out-of-service first", newNode().ready(v1.ConditionFalse).
			taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute).
			taint(names.QuarantineTaint, v1.TaintEffectNoSchedule).
			taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute).
			condition(names.FencingCompleteCondition, v1.ConditionTrue).n, true, ReasonOutOfService},
		{"unrelated taints ignored", newNode().ready(v1.ConditionUnknown).
			taint("node.kubernetes.io/unreachable", v1.TaintEffectNoExecute).
			taint("node.kubernetes.io/not-ready", v1.TaintEffectNoExecute).n, true, ReasonNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeReason(tc.node, tc.safe); got != tc.want {
				t.Errorf("NodeReason() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestVouched(t *testing.T) {
	want := map[Reason]bool{
		ReasonNone: false, ReasonSafeDetach: false, ReasonNodeGone: false,
		ReasonOutOfService: true, ReasonForceEviction: true, ReasonFenced: true,
	}
	for r, v := range want {
		if got := r.Vouched(); got != v {
			t.Errorf("%q.Vouched() = %v, want %v", r, got, v)
		}
	}
}

func TestSafeDetachEnabled(t *testing.T) {
	mk := func(ann map[string]string) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "d", Annotations: ann}}
	}
	tests := []struct {
		name string
		d    *storagev1.CSIDriver
		want bool
	}{
		{"no object", nil, false},
		{"no annotation", mk(nil), false},
		{"true", mk(map[string]string{names.SafeDetachAnnotation: "true"}), true},
		{"not exactly true", mk(map[string]string{names.SafeDetachAnnotation: "yes"}), false},
	}
	for _, tc := range tests {
		if got := SafeDetachEnabled(tc.d); got != tc.want {
			t.Errorf("%s: SafeDetachEnabled() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
