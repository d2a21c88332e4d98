package cutoff

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// node builds the test node: Ready=True unless an option says otherwise.
func node(opts ...testobj.NodeOption) *v1.Node { return testobj.Node("node-1", opts...) }

var (
	ready    = testobj.ReadySince(testobj.Epoch)
	notReady = testobj.NotReadySince(testobj.Epoch)
	unknown  = testobj.UnknownSince(testobj.Epoch)

	quarantine    = testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
	forceEviction = testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)
)

func TestNodeReason(t *testing.T) {
	tests := []struct {
		name string
		node *v1.Node
		safe bool
		want Reason
	}{
		{"node gone", nil, true, ReasonNodeGone},
		{"healthy", node(ready), true, ReasonNone},
		{"not ready alone", node(unknown), true, ReasonNone},
		{"out-of-service any effect, even Ready", node(ready, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoSchedule)), false, ReasonOutOfService},
		{"quarantine NoSchedule, opted in", node(notReady, quarantine), true, ReasonSafeDetach},
		{"quarantine without Ready condition", node(testobj.NoReadyCondition(), quarantine), true, ReasonSafeDetach},
		{"quarantine, not opted in", node(notReady, quarantine), false, ReasonNone},
		{"quarantine key with foreign effect", node(notReady, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoExecute)), true, ReasonNone},
		{"quarantine on Ready node", node(ready, quarantine), true, ReasonNone},
		{"force-eviction NoExecute on NotReady", node(unknown, forceEviction), false, ReasonForceEviction},
		{"force-eviction key with NoSchedule", node(unknown, testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoSchedule)), false, ReasonNone},
		{"force-eviction on Ready node (the node is not cut off; its detaches are, see DetachReason)", node(ready, forceEviction), false, ReasonNone},
		{"FencingComplete=True", node(unknown, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)), false, ReasonFenced},
		{"FencingComplete=False", node(unknown, testobj.Condition(names.FencingCompleteCondition, v1.ConditionFalse)), false, ReasonNone},
		{"order: out-of-service first", node(notReady, forceEviction, quarantine,
			testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute),
			testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)), true, ReasonOutOfService},
		{"unrelated taints ignored", node(unknown,
			testobj.Taint("node.kubernetes.io/unreachable", v1.TaintEffectNoExecute),
			testobj.Taint("node.kubernetes.io/not-ready", v1.TaintEffectNoExecute)), true, ReasonNone},
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
	mk := func(ann map[string]string) *storagev1.CSIDriver { return testobj.CSIDriver("d", ann) }
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

func TestDetachReason(t *testing.T) {
	const vol v1.UniqueVolumeName = "kubernetes.io/csi/drv^vol-1"
	intent := &Record{Version: RecordVersion, Reason: ReasonSafeDetach, By: ByControllerPrefix + "quarantine"}
	inUse := testobj.VolumesInUse(vol)
	tests := []struct {
		name string
		in   DetachInput
		want Reason
	}{
		{"healthy, nothing recorded", DetachInput{Node: node(ready), SafeDetach: true, Volume: vol}, ReasonNone},
		{"node gone", DetachInput{SafeDetach: true, Volume: vol}, ReasonNodeGone},
		{"node gone beats an intent", DetachInput{Intent: intent}, ReasonNodeGone},
		{"node reason first: out-of-service over the intent", DetachInput{Node: node(ready, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)), Intent: intent}, ReasonOutOfService},
		{"intent on a Ready node without taints", DetachInput{Node: node(ready), Intent: intent, Volume: vol}, ReasonSafeDetach},
		{"intent of a driver not opted in still counts", DetachInput{Node: node(ready), Intent: &Record{Reason: ReasonForceEviction}}, ReasonForceEviction},
		{"intent without a reason is unreadable, still a fence", DetachInput{Node: node(ready), Intent: &Record{}}, ReasonUnreadable},
		{"quarantine outlives Ready", DetachInput{Node: node(ready, quarantine), SafeDetach: true}, ReasonSafeDetach},
		{"quarantine, driver not opted in", DetachInput{Node: node(ready, quarantine)}, ReasonNone},
		{"force-eviction outlives Ready", DetachInput{Node: node(ready, forceEviction)}, ReasonForceEviction},
		{"force-eviction key with a foreign effect", DetachInput{Node: node(ready, testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoSchedule))}, ReasonNone},
		{"volume still in use: forced detach", DetachInput{Node: node(ready, inUse), Volume: vol}, ReasonInUse},
		{"another volume in use", DetachInput{Node: node(ready, inUse), Volume: "kubernetes.io/csi/drv^vol-2"}, ReasonNone},
		{"volume unknown: in-use cannot be judged", DetachInput{Node: node(ready, testobj.VolumesInUse(""))}, ReasonNone},
		{"order: intent before taints and in-use", DetachInput{Node: node(ready, forceEviction, inUse), Intent: intent, Volume: vol}, ReasonSafeDetach},
		{"order: taint before in-use", DetachInput{Node: node(ready, forceEviction, inUse), Volume: vol}, ReasonForceEviction},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DetachReason(tc.in); got != tc.want {
				t.Errorf("DetachReason() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDetachReasonWidensNodeReason: whatever NodeReason finds, DetachReason
// finds too; it may only add reasons, never drop one.
func TestDetachReasonWidensNodeReason(t *testing.T) {
	nodes := []*v1.Node{nil, node(ready), node(notReady, quarantine), node(unknown, forceEviction),
		node(ready, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)),
		node(unknown, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))}
	for i, n := range nodes {
		for _, safe := range []bool{false, true} {
			if r := NodeReason(n, safe); r != ReasonNone && DetachReason(DetachInput{Node: n, SafeDetach: safe}) != r {
				t.Errorf("node %d safe=%v: NodeReason %q, DetachReason %q", i, safe, r, DetachReason(DetachInput{Node: n, SafeDetach: safe}))
			}
		}
	}
}

// TestNodeDown: not Ready, or fenced while Ready is the stale condition from
// before the fence; a Ready that turned True after the fence (or in the
// same second) is a node that came back.
func TestNodeDown(t *testing.T) {
	t0 := testobj.Epoch
	fenced := func(at time.Time) testobj.NodeOption {
		return testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, at)
	}
	for _, tc := range []struct {
		name string
		node *v1.Node
		want bool
	}{
		{"Ready, not fenced", testobj.Node("n", testobj.ReadySince(t0)), false},
		{"NotReady", testobj.Node("n", testobj.NotReadySince(t0)), true},
		{"Unknown", testobj.Node("n", testobj.UnknownSince(t0)), true},
		{"Ready from before the fence", testobj.Node("n", testobj.ReadySince(t0), fenced(t0.Add(time.Minute))), true},
		{"Ready again after the fence", testobj.Node("n", testobj.ReadySince(t0.Add(2*time.Minute)), fenced(t0.Add(time.Minute))), false},
		{"Ready and fenced in the same second: back, the safe side", testobj.Node("n", testobj.ReadySince(t0), fenced(t0)), false},
		{"FencingComplete False", testobj.Node("n", testobj.ReadySince(t0), testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionFalse, t0.Add(time.Minute))), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeDown(tc.node); got != tc.want {
				t.Errorf("NodeDown = %v, want %v", got, tc.want)
			}
		})
	}
}
