package podgc

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestDecide(t *testing.T) {
	t0 := testobj.Epoch
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)
	down := testobj.NotReadySince(t0)
	terminating := []testobj.PodOption{testobj.OnNode("n1"), testobj.Terminating(t0)}
	with := func(extra ...testobj.PodOption) []testobj.PodOption {
		return append(append([]testobj.PodOption{}, terminating...), extra...)
	}

	tests := []struct {
		name       string
		node       *v1.Node
		pod        *v1.Pod
		wantDelete bool
		wantWhy    string
	}{
		{"terminating pod on tainted NotReady node", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", terminating...), true, "out of service"},
		{"Ready=Unknown counts as not Ready", testobj.Node("n1", testobj.UnknownSince(t0), oos), testobj.Pod("ns", "p", terminating...), true, "out of service"},
		{"any value and effect of the taint key", testobj.Node("n1", down, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoSchedule)), testobj.Pod("ns", "p", terminating...), true, ""},
		{"Ready node: never", testobj.Node("n1", testobj.ReadySince(t0), oos), testobj.Pod("ns", "p", terminating...), false, "Ready"},
		{"Ready node fenced (power read back Off): the Ready condition is stale", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(time.Minute))), testobj.Pod("ns", "p", terminating...), true, "fenced"},
		{"Ready node fenced, no time on the fence: cannot tell it from a node back, never", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)), testobj.Pod("ns", "p", terminating...), false, "Ready"},
		{"Ready node, FencingComplete False: never", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.Condition(names.FencingCompleteCondition, v1.ConditionFalse)), testobj.Pod("ns", "p", terminating...), false, "Ready"},
		{"Ready node fenced but no out-of-service taint: never", testobj.Node("n1", testobj.ReadySince(t0), testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(time.Minute))), testobj.Pod("ns", "p", terminating...), false, "out-of-service"},
		{"fenced node back: Ready turned True after the fence (Recovering, manual unfence)", testobj.Node("n1", testobj.ReadySince(t0.Add(time.Minute)), oos, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0)), testobj.Pod("ns", "p", terminating...), false, "Ready"},
		{"fenced node, Ready and the fence in the same second: counts as back", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0)), testobj.Pod("ns", "p", terminating...), false, "Ready"},
		{"fenced node, Ready stale from before the fence", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(time.Minute))), testobj.Pod("ns", "p", terminating...), true, "fenced"},
		{"Ready node fenced, pod not terminating: never", testobj.Node("n1", testobj.ReadySince(t0), oos, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(time.Minute))), testobj.Pod("ns", "p", testobj.OnNode("n1")), false, "not terminating"},
		{"node without Ready condition counts as not Ready", func() *v1.Node { n := testobj.Node("n1", oos); n.Status.Conditions = nil; return n }(), testobj.Pod("ns", "p", terminating...), true, ""},
		{"no out-of-service taint", testobj.Node("n1", down, testobj.Taint("other", v1.TaintEffectNoExecute)), testobj.Pod("ns", "p", terminating...), false, "no out-of-service taint"},
		{"pod not terminating", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", testobj.OnNode("n1")), false, "not terminating"},
		{"pod tolerating the taint is still deleted, as upstream", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", with(testobj.Tolerate(names.OutOfServiceTaint))...), true, ""},
		{"pod already gone", testobj.Node("n1", down, oos), nil, false, "gone"},
		{"node deleted", nil, testobj.Pod("ns", "p", terminating...), false, "does not exist"},
		{"pod on another node", testobj.Node("n2", down, oos), testobj.Pod("ns", "p", terminating...), false, "not bound"},
		{"already force-deleted pod held by a finalizer", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.ForceDeleted(t0)), false, "already force-deleted"},
		{"mirror pod is deleted, as upstream", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", with(testobj.Mirror())...), true, ""},
		{"DaemonSet pod is deleted, as upstream", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", with(testobj.OwnedBy("DaemonSet", "ds"))...), true, ""},
		{"pod with mixed and RWX volumes is deleted: the human vouched for the node", testobj.Node("n1", down, oos), testobj.Pod("ns", "p", with(testobj.Claim("a", "rwx"), testobj.HostPath("h", "/x"))...), true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.node, tc.pod)
			if got.Delete != tc.wantDelete {
				t.Fatalf("Decide() = %+v, want Delete=%v", got, tc.wantDelete)
			}
			if !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("Why = %q, want it to mention %q", got.Why, tc.wantWhy)
			}
			if got.Why == "" {
				t.Error("every decision must say why")
			}
		})
	}
}
