package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

var forceEvictionTaint = corev1.Taint{Key: names.ForceEvictionTaint, Effect: corev1.TaintEffectNoExecute}

// forceDeleted counts the controller's FencelineForceDeleted Events about
// pods in the scenario's namespace.
func (s *scenario) forceDeleted(ctx context.Context) int {
	evs, err := s.w.Cluster.Client().CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "FencelineForceDeleted").String(),
	})
	if err != nil {
		s.t.Fatalf("listing events: %v", err)
	}
	return len(evs.Items)
}

// run runs a subtest on the scenario's world; the scenario's helpers report
// to the subtest while it runs.
func (s *scenario) run(name string, f func(t *testing.T)) {
	parent := s.t
	ok := parent.Run(name, func(t *testing.T) {
		s.t = t
		defer func() { s.t = parent }()
		f(t)
	})
	if !ok {
		parent.FailNow() // later steps build on this one
	}
}

func (s *scenario) waitUntainted(node, key string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, key+" removed from "+node, func(ctx context.Context) (bool, error) {
		has, err := s.w.HasTaint(ctx, node, key)
		return err == nil && !has, nil
	}))
}

// TestForceEvictionNodeComesBack covers the force-eviction taint when the
// node's kubelet is, or comes back, alive: no pod a live kubelet runs is
// force-deleted, and the taint does not outlive its purpose.
func TestForceEvictionNodeComesBack(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	s.run("taint on a Ready node", func(t *testing.T) {
		must(t, s.w.AddTaint(s.ctx, nodeA, forceEvictionTaint))
		s.waitUntainted(nodeA, names.ForceEvictionTaint)
		if n := s.forceDeleted(s.ctx); n != 0 {
			t.Fatalf("%d pods force-deleted from a Ready node", n)
		}
	})

	// Wherever db-0 runs now (taint eviction may have moved it gracefully).
	p, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", "", failoverTimeout)
	must(t, err)
	nodeA = p.Spec.NodeName

	s.run("node back before the taint", func(t *testing.T) {
		s.powerOff(nodeA)
		must(t, s.w.PowerOn(s.ctx, nodeA))
		must(t, s.w.AddTaint(s.ctx, nodeA, forceEvictionTaint))
		s.waitUntainted(nodeA, names.ForceEvictionTaint)
		if n := s.forceDeleted(s.ctx); n != 0 {
			t.Fatalf("%d pods force-deleted from a node that came back", n)
		}
	})

	p, err = s.w.WaitRunning(s.ctx, s.ns, "db-0", "", failoverTimeout)
	must(t, err)
	nodeA = p.Spec.NodeName
	s.waitAcceptedWrite(nodeA, time.Now())

	s.run("node back after the eviction", func(t *testing.T) {
		s.powerOff(nodeA)
		must(t, s.w.AddTaint(s.ctx, nodeA, forceEvictionTaint))
		moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
		must(t, err)
		s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
		// Events are written asynchronously; give the recorder time.
		must(t, world.WaitFor(s.ctx, failoverTimeout, "FencelineForceDeleted Event for db-0", func(ctx context.Context) (bool, error) {
			return s.forceDeleted(ctx) > 0, nil
		}))
		must(t, s.w.PowerOn(s.ctx, nodeA))
		s.waitNodeCleanedUp(nodeA)
		s.waitUntainted(nodeA, names.ForceEvictionTaint)
		s.waitUntainted(nodeA, corev1.TaintNodeUnreachable)
	})
}
