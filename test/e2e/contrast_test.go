package e2e

import (
	"context"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

// TestUpstreamContrast makes the corruption upstream allows real, then shows
// Fenceline preventing it. The driver lets a plain unpublish succeed while
// the node still uses the volume (real-array mode, the world's default), as
// many real drivers do.
//
// Upstream (driver without fence, no fenceline-controller): after the
// out-of-service taint the volume moves to another node while the zombie
// node A still writes, and A's writes are accepted after the new node has
// the volume: two writers on an RWO volume.
//
// Fenceline (fence on, controller on): A's writes stop at the fence.
func TestUpstreamContrast(t *testing.T) {
	t.Parallel()
	t.Run("upstream corrupts", func(t *testing.T) {
		s := newScenario(t, world.Options{
			ZombieWrites: true,
			NoController: true,
			Driver:       world.DriverOptions{NoFence: true},
		})
		pod := s.startDB()
		nodeA := pod.Spec.NodeName
		s.powerOff(nodeA)
		nodeB := s.outOfService(nodeA).Spec.NodeName
		s.waitAcceptedWrite(nodeB, time.Time{})
		must(t, world.WaitFor(s.ctx, 20*time.Second, "a write from "+nodeA+" accepted while "+nodeB+" has the volume", func(context.Context) (bool, error) {
			recs := s.audit()
			publish := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(nodeB), audit.OK())
			return publish >= 0 && audit.Count(recs[publish+1:], audit.Method("Write"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK()) > 0, nil
		}))
		// The invariant checker sees the same corruption.
		res, err := s.w.CheckFailover(invariant.Failover{Volume: s.handle, From: nodeA, CutOff: s.t0})
		must(t, err)
		if !res.Broke(invariant.RuleFenceRequired) || !res.Broke(invariant.RuleNoOldWrites) {
			t.Fatalf("invariant checker missed upstream's corruption: %v", res.Err())
		}
	})
	t.Run("fenceline prevents it", func(t *testing.T) {
		s := newScenario(t, world.Options{ZombieWrites: true})
		pod := s.startDB()
		nodeA := pod.Spec.NodeName
		s.powerOff(nodeA)
		s.assertFencedBeforePublish(nodeA, s.outOfService(nodeA).Spec.NodeName)
	})
}
