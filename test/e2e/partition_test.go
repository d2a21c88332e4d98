package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestPartitionHealsWhileFencedDetachFails: a node of a safe-detach driver is
// partitioned, not powered off: same boot, mounts and writer intact.
// Quarantine force-deletes db-0 and the attacher decides a fenced detach, but
// the driver fails the first unpublishes. Meanwhile the partition heals: the
// node is Ready and untainted-looking again while its kubelet is slow to clean
// up (its first NodeUnpublishVolume calls fail). Every retry must stay fenced
// (the decision is recorded on the VolumeAttachment); a plain unpublish would
// succeed on this real-array driver and hand the volume over while the node
// still has it staged. Afterwards the node's unforced clean-up lifts the fence
// and the quarantine, and the volume can come back to that node.
func TestPartitionHealsWhileFencedDetachFails(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=2s"},
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	must(t, s.w.SetDriverFaults(s.ctx,
		faults.FailNext("ControllerUnpublishVolume", 4, codes.Unavailable),
		faults.FailNext("NodeUnpublishVolume", 30, codes.Unavailable)))

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s partitioned", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a failed fenced unpublish from "+nodeA, func(context.Context) (bool, error) {
		return audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA),
			audit.Fenced(), audit.Code("Unavailable")) > 0, nil
	}))
	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	s.timeline.Add(time.Now(), "partition of %s healed", nodeA)

	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA),
		func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain ControllerUnpublishVolume calls from %s after a fenced decision", n, nodeA)
	}
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA), audit.Fenced()); n < 2 {
		t.Fatalf("%d fenced unpublish attempts from %s, want the failed ones and a retry", n, nodeA)
	}
	s.assertInvariant(nodeA, moved.Spec.NodeName)

	// The kubelet's unforced clean-up lifts the fence and the quarantine ...
	s.waitNodeCleanedUp(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+nodeA, func(ctx context.Context) (bool, error) {
		q, err := s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
		return err == nil && !q, nil
	}))
	// ... and the volume can be attached to that node again.
	s.moveBack(nodeA)
}

// moveBack cordons every node but node, deletes db-0 and waits until it
// runs on node again.
func (s *scenario) moveBack(node string) {
	s.t.Helper()
	client := s.w.Cluster.Client()
	_, err := s.w.OnlyOn(s.ctx, node) // left cordoned: the story ends here
	must(s.t, err)
	must(s.t, client.CoreV1().Pods(s.ns).Delete(s.ctx, "db-0", metav1.DeleteOptions{}))
	s.timeline.Add(time.Now(), "db-0 deleted to move it back to %s", node)
	var back *corev1.Pod
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "db-0 Running on "+node+" again", func(ctx context.Context) (bool, error) {
		p, err := s.w.RunningPod(ctx, s.ns, "db-0")
		if err != nil || p == nil {
			return false, nil
		}
		back = p
		return p.Spec.NodeName == node, nil
	}))
	s.waitAcceptedWrite(node, back.CreationTimestamp.Time)
}
