package e2e

import (
	"context"
	"testing"
	"time"

	"fenceline.io/fenceline/test/world"
)

// TestNonGracefulShutdown is KEP-2268 with Fenceline: node A loses power
// while its pod writes to an RWO volume and keeps writing (partitioned, not
// dead); once the out-of-service taint is applied the pod is replaced on
// another node, the volume is fenced off A before it is published to the
// new node (an Event on the claim says so), and none of A's later writes is accepted. A then boots, cleans
// up with force, and the taint is removed.
func TestNonGracefulShutdown(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	s.powerOff(nodeA)
	moved := s.outOfService(nodeA)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	// Users see the fence on their claim, not only on the VolumeAttachment.
	s.waitClaimEvent(world.ClaimTemplate+"-db-0", "FencedDetach")
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())

	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.waitNodeCleanedUp(nodeA)
	must(t, s.w.RemoveTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key))
	must(t, world.WaitFor(s.ctx, nodeLostTimeout, nodeA+" Ready without the out-of-service taint", func(ctx context.Context) (bool, error) {
		tainted, err := s.w.HasTaint(ctx, nodeA, world.OutOfServiceTaint.Key)
		return err == nil && !tainted, nil
	}))
	// The replacement is undisturbed by A's return.
	if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || p == nil || p.Spec.NodeName != moved.Spec.NodeName {
		t.Fatalf("after %s came back, db-0 = %v (err %v), want Running on %s", nodeA, p, err, moved.Spec.NodeName)
	}
}
