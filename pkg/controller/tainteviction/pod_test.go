package tainteviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

func TestDecidePod(t *testing.T) {
	t0 := testobj.Epoch
	now := t0.Add(time.Hour)
	unreachable := testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, t0)
	down := testobj.UnknownSince(t0)
	up := testobj.ReadySince(t0)
	onN1 := []testobj.PodOption{testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour))}
	pod := func(extra ...testobj.PodOption) *v1.Pod {
		return testobj.Pod("ns", "p", append(append([]testobj.PodOption{}, onN1...), extra...)...)
	}
	tolerate := func(secs int64) testobj.PodOption {
		return testobj.Toleration(v1.Toleration{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &secs})
	}
	oos := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, t0.Add(time.Minute))
	fencedAt := func(at time.Time) testobj.NodeOption {
		return testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, at)
	}
	hook := testobj.PodAnnotation(EvictWhenAnnotation, "example.com/Checkpointed")
	checkpointed := testobj.PodCondition("example.com/Checkpointed", v1.ConditionTrue)

	tests := []struct {
		name    string
		in      PodInput
		want    Action
		wantAt  time.Time
		wantWhy string
	}{
		{"pod gone", PodInput{Node: testobj.Node("n1", down, unreachable)}, ActionNone, time.Time{}, "gone"},
		{"node gone", PodInput{Pod: pod()}, ActionNone, time.Time{}, "gone"},
		{"pod on another node", PodInput{Pod: testobj.Pod("ns", "p", testobj.OnNode("n2")), Node: testobj.Node("n1", down, unreachable)}, ActionNone, time.Time{}, "not bound"},
		{"already terminating", PodInput{Pod: pod(testobj.Terminating(t0)), Node: testobj.Node("n1", down, unreachable)}, ActionNone, time.Time{}, "already"},
		{"no NoExecute taint", PodInput{Pod: pod(), Node: testobj.Node("n1", up)}, ActionNone, time.Time{}, "no NoExecute"},
		{"toleration not over: wait", PodInput{Pod: pod(tolerate(7200)), Node: testobj.Node("n1", down, unreachable)}, ActionWait, t0.Add(2 * time.Hour), ""},
		{"stateless pod on a dead node: graceful eviction, as upstream", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable)}, ActionEvict, time.Time{}, ""},
		{"stateful pod on a dead node, not cut off: hold", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true}, ActionHold, time.Time{}, "not known cut off"},
		{"stateful pod on a dead fenced node: force delete", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true, CutOff: cutoff.ReasonFenced}, ActionForceDelete, time.Time{}, "fenced"},
		{"stateful pod on a dead out-of-service node: force delete", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true, CutOff: cutoff.ReasonOutOfService}, ActionForceDelete, time.Time{}, "out-of-service"},
		{"stateful pod of safe-detach drivers on a dead node not cut off yet: evicted, for quarantine to recover", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true, SafeDetach: true}, ActionEvict, time.Time{}, "hands the pod to quarantine"},
		{"the same with its hook condition missing: hold", PodInput{Pod: pod(tolerate(300), hook), Node: testobj.Node("n1", down, unreachable), Stateful: true, SafeDetach: true}, ActionHold, time.Time{}, "Checkpointed"},
		{"stateful pod on a dead quarantined node: quarantine's", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true, SafeDetach: true, CutOff: cutoff.ReasonSafeDetach}, ActionHold, time.Time{}, "quarantine"},
		{"stateful pod on a dead force-evicted node: force-eviction's", PodInput{Pod: pod(tolerate(300)), Node: testobj.Node("n1", down, unreachable), Stateful: true, CutOff: cutoff.ReasonForceEviction}, ActionHold, time.Time{}, "force-eviction"},
		{"stateful pod on a NotReady node with a Ready=False condition: hold", PodInput{Pod: pod(), Node: testobj.Node("n1", testobj.NotReadySince(t0), testobj.TaintAt(v1.TaintNodeNotReady, v1.TaintEffectNoExecute, t0)), Stateful: true}, ActionHold, time.Time{}, "not known cut off"},
		{"stateful pod on a live tainted node: graceful, the kubelet stops it", PodInput{Pod: pod(), Node: testobj.Node("n1", up, testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0)), Stateful: true}, ActionEvict, time.Time{}, ""},
		{"hook condition missing on a live node: hold", PodInput{Pod: pod(hook), Node: testobj.Node("n1", up, testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))}, ActionHold, time.Time{}, "Checkpointed"},
		{"hook annotation empty: hold, saying so", PodInput{Pod: pod(testobj.PodAnnotation(EvictWhenAnnotation, "")), Node: testobj.Node("n1", up, testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))}, ActionHold, time.Time{}, "annotation is empty"},
		{"hook condition True: evict", PodInput{Pod: pod(hook, checkpointed), Node: testobj.Node("n1", up, testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))}, ActionEvict, time.Time{}, ""},
		{"stateful pod on a fenced node whose Ready is from before the fence: force delete", PodInput{Pod: pod(), Node: testobj.Node("n1", up, fencedAt(t0.Add(time.Minute)), oos), Stateful: true, CutOff: cutoff.ReasonFenced}, ActionForceDelete, time.Time{}, "power was read back Off"},
		{"stateless pod on that fenced node: graceful eviction, as upstream", PodInput{Pod: pod(), Node: testobj.Node("n1", up, fencedAt(t0.Add(time.Minute)), oos), CutOff: cutoff.ReasonFenced}, ActionEvict, time.Time{}, ""},
		{"stateful pod on a fenced node that is Ready again since: graceful, its kubelet lives", PodInput{Pod: pod(), Node: testobj.Node("n1", testobj.ReadySince(t0.Add(2*time.Minute)), fencedAt(t0.Add(time.Minute)), oos), Stateful: true, CutOff: cutoff.ReasonFenced}, ActionEvict, time.Time{}, ""},
		{"hook on a stateful pod of a dead fenced node: the hook cannot keep it", PodInput{Pod: pod(hook, tolerate(0)), Node: testobj.Node("n1", down, unreachable), Stateful: true, CutOff: cutoff.ReasonFenced}, ActionForceDelete, time.Time{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			got := DecidePod(tc.in)
			if got.Action != tc.want || (tc.want == ActionWait && !got.At.Equal(tc.wantAt)) {
				t.Fatalf("DecidePod = %+v, want %s at %s", got, tc.want, tc.wantAt)
			}
			if tc.wantWhy != "" && !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("why %q does not mention %q", got.Why, tc.wantWhy)
			}
		})
	}
}
