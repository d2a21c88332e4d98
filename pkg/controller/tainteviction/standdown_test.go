package tainteviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/internal/testobj"
)

func TestRecheckEviction(t *testing.T) {
	t0 := testobj.Epoch
	now := t0.Add(time.Second)
	ready := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	untainted := testobj.Node("n1", testobj.ReadySince(t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0))
	tests := []struct {
		name      string
		node      *v1.Node
		want      Action
		standDown StandDown
		ok        bool
		why       string
	}{
		{"due, no stand-down: evict", ready, ActionEvict, StandDown{}, true, "does not tolerate"},
		{"due, upstream seen since the decision: held", ready, ActionEvict, StandDown{Until: now.Add(UpstreamWindow)}, false, "running as well"},
		{"stand-down ends exactly now: evict", ready, ActionEvict, StandDown{Until: now}, true, "does not tolerate"},
		{"stand-down ended a moment ago: evict", ready, ActionEvict, StandDown{Until: now.Add(-time.Nanosecond)}, true, "does not tolerate"},
		{"taint removed since the decision: not evicted", untainted, ActionEvict, StandDown{}, false, "instead of"},
		{"taint removed and upstream seen: the stand-down is named", untainted, ActionEvict, StandDown{Until: now.Add(time.Minute)}, false, "running as well"},
		{"the fresh decision is another action: not written", ready, ActionForceDelete, StandDown{}, false, "instead of"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := RecheckEviction(PodInput{Pod: pod, Node: tc.node, Now: now}, tc.want, tc.standDown)
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Errorf("RecheckEviction() = %v, %q; want %v and a reason containing %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

// TestSyncStandsDownAtWriteTime: upstream's first Event arrives after the
// sync decided to evict but before the write. The write-time recheck sees
// the stand-down and the pod is not evicted by Fenceline too.
func TestSyncStandsDownAtWriteTime(t *testing.T) {
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0))
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), node, pod)
	upstream := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "ns", Name: "web.1"},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web"},
		Reason:         "TaintManagerEviction", Message: "Marking for deletion Pod ns/web",
		Source:        v1.EventSource{Component: UpstreamController},
		LastTimestamp: metav1.NewTime(e.Clock.Now()),
	}
	// The fresh read of the node at write time is the moment the Event
	// lands: after the sync's gate, before the write's recheck.
	e.Kube.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		e.c.upstream.observe(klog.Background(), upstream)
		return false, nil, nil
	})
	e.sync("n1")
	if p := e.pod("web"); p == nil || p.DeletionTimestamp != nil || hasTaintEviction(p) {
		t.Fatalf("pod evicted although upstream's controller was seen acting before the write: %+v", p)
	}
	if ev := e.events(); hasEvent(ev, "Normal TaintManagerEviction Marking") {
		t.Errorf("events %q show Fenceline's eviction", ev)
	}
}

func hasTaintEviction(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget {
			return true
		}
	}
	return false
}
