package e2e

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/test/world"
)

// diffTolerance bounds how far Fenceline's eviction time of a pod may be
// from upstream's: the jitter of two runs on a loaded machine. (Measured:
// within 15 ms of each other once both controllers run. Fenceline counts
// from the first sighting within timeAdded's second, as upstream counts
// from its sighting.)
const diffTolerance = time.Second

// evictionRun is what one run of the differential scenario saw: when each
// evicted pod was seen deleted, from the taint, and which pods stayed.
type evictionRun struct {
	evicted map[string]time.Duration
	stayed  []string
}

// runEvictionScenario taints a Ready node with a NoExecute taint under
// which seven pods with different tolerations run, once with
// kube-controller-manager's taint-eviction-controller and once with
// Fenceline's in its place.
func runEvictionScenario(t *testing.T, fenceline bool) evictionRun {
	e := startEvictionWorld(t, world.Options{TaintEviction: fenceline})
	ctx, w, del, ns := e.ctx, e.w, e.del, evictionNS
	node := w.Nodes[0]
	secs := func(s int64) *int64 { return ptr.To(s) }
	pods := []*corev1.Pod{
		plainPod(ns, "untolerated", node),
		plainPod(ns, "other-key", node, tolerate("example.com/other", nil)),
		plainPod(ns, "zero", node, tolerate(drainTaint, secs(0))),
		plainPod(ns, "four", node, tolerate(drainTaint, secs(4))),
		// Each taint takes the first toleration that matches it (20 s),
		// not the shortest of those that would (8 s).
		plainPod(ns, "first-match", node, tolerate(drainTaint, secs(20)), corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(8)}),
		plainPod(ns, "twelve", node, tolerate(drainTaint, secs(12))),
		plainPod(ns, "forever", node, tolerate(drainTaint, nil)),
	}
	startPods(t, ctx, w, pods...)
	t0 := taintNode(t, ctx, w, node, drainTaint)
	evicting := []string{"untolerated", "other-key", "zero", "four", "twelve", "first-match"}
	must(t, del.wait(ctx, time.Minute, evicting...))
	run := evictionRun{evicted: map[string]time.Duration{}}
	for _, p := range pods {
		if at, _ := del.when(p.Name); !at.IsZero() {
			run.evicted[p.Name] = at.Sub(t0)
		} else {
			run.stayed = append(run.stayed, p.Name)
		}
	}
	return run
}

// TestTaintEvictionMatchesUpstream is the differential test: the same
// scenario evicts the same pods, in the same order, at the same times
// (within diffTolerance) under kube-controller-manager's taint-eviction-
// controller and under Fenceline's.
func TestTaintEvictionMatchesUpstream(t *testing.T) {
	// One world at a time: each subtest's cleanup stops its world. Not
	// parallel with the other stories: it compares times across two runs,
	// which must see the same load.
	var upstream, ours evictionRun
	t.Run("kube-controller-manager", func(t *testing.T) { upstream = runEvictionScenario(t, false) })
	t.Run("fenceline", func(t *testing.T) { ours = runEvictionScenario(t, true) })
	if t.Failed() {
		return
	}
	t.Logf("upstream: evicted %v, stayed %v", upstream.evicted, upstream.stayed)
	t.Logf("fenceline: evicted %v, stayed %v", ours.evicted, ours.stayed)
	if !slices.Equal(upstream.stayed, ours.stayed) {
		t.Errorf("pods not evicted: upstream %v, fenceline %v", upstream.stayed, ours.stayed)
	}
	for _, name := range slices.Sorted(maps.Keys(upstream.evicted)) {
		u := upstream.evicted[name]
		o, ok := ours.evicted[name]
		if !ok {
			t.Errorf("%s: evicted by upstream after %s, not by fenceline", name, u)
			continue
		}
		if d := o - u; d < -diffTolerance || d > diffTolerance {
			t.Errorf("%s: evicted after %s by upstream, %s by fenceline (more than %s apart)", name, u, o, diffTolerance)
		}
	}
	for name := range ours.evicted {
		if _, ok := upstream.evicted[name]; !ok {
			t.Errorf("%s: evicted by fenceline only", name)
		}
	}
	// Order: wherever upstream's times are clearly apart, ours are in the
	// same order.
	for a, ua := range upstream.evicted {
		for b, ub := range upstream.evicted {
			if ua+diffTolerance < ub && ours.evicted[a] >= ours.evicted[b] {
				t.Errorf("order: upstream evicts %s (%s) before %s (%s), fenceline does not (%s, %s)", a, ua, b, ub, ours.evicted[a], ours.evicted[b])
			}
		}
	}
}
