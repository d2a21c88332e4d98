package e2e

import (
	"context"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestSafeDetachWithoutHuman: the driver's CSIDriver carries
// fenceline.io/safe-detach, so fenceline-controller quarantines a lost node
// by itself, force-deletes its pod and the attacher fences the volume; the
// test applies no taint. The quarantine is lifted only after the node came
// back and cleaned up.
func TestSafeDetachWithoutHuman(t *testing.T) {
	t.Parallel()
	s, nodeA := safeDetachFailover(t, false)
	if tainted, err := s.w.HasTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key); err != nil || tainted {
		t.Fatalf("%s has the out-of-service taint (err %v); nobody should have applied it", nodeA, err)
	}

	must(t, s.w.PowerOn(s.ctx, nodeA))
	var lifted time.Time
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+nodeA, func(ctx context.Context) (bool, error) {
		q, err := s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
		if err == nil && !q {
			lifted = time.Now()
		}
		return err == nil && !q, nil
	}))
	s.waitNodeCleanedUp(nodeA)
	recs := s.audit()
	i := audit.FirstIndex(recs, audit.Method("NodeUnstageVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK())
	if recs[i].Time.After(lifted) {
		t.Fatalf("quarantine of %s lifted at %s, before its node-side clean-up at %s", nodeA, lifted.Format(time.RFC3339Nano), recs[i].Time.Format(time.RFC3339Nano))
	}
}

// TestSafeDetachWithFencelineTaintEviction: Fenceline's taint-eviction
// replaces kube-controller-manager's. A pod whose only stateful volume is a
// safe-detach driver's, on a node that lost power and is not cut off yet,
// is evicted gracefully once its toleration ends, so that quarantine has a
// terminating pod to recover: the node is quarantined, the pod moves and
// the detach is fenced, with no human. Holding such a pod until the node is
// cut off would wait forever: nothing else cuts it off.
func TestSafeDetachWithFencelineTaintEviction(t *testing.T) {
	t.Parallel()
	safeDetachFailover(t, true)
}

// safeDetachFailover starts a database on a safe-detach driver (with
// Fenceline's taint-eviction when asked), cuts its node's power and waits,
// with no human, for the node's quarantine and the pod Running elsewhere
// after a fenced unpublish. It returns the scenario and the lost node.
func safeDetachFailover(t *testing.T, taintEviction bool) (*scenario, string) {
	t.Helper()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=2s"},
		TaintEviction:  taintEviction,
	})
	nodeA := s.startDB().Spec.NodeName
	s.powerOff(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine taint on "+nodeA, func(ctx context.Context) (bool, error) {
		return s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
	}))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	return s, nodeA
}
