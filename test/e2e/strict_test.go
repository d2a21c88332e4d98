package e2e

import (
	"context"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/world"
)

// TestStrictDriverWaitsForTaint: node A is lost and someone deletes its
// VolumeAttachment early (as some recovery tools do) while A still lists
// the volume in volumesInUse. That detach was forced, whoever forced it: the
// attacher fences it at once (reason in-use), so the strict driver never
// sees a plain unpublish, and nothing of A's is published again: the
// attach/detach controller, which still sees db-0 on A, re-creates the
// attachment and the fenced array refuses it. When the out-of-service taint
// arrives, db-0 moves, its volume fenced off A before it is published
// elsewhere.
func TestStrictDriverWaitsForTaint(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true, Driver: world.DriverOptions{StrictUnpublish: true}})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	s.powerOff(nodeA)

	va := s.attachment(nodeA)
	must(t, s.w.Cluster.Client().StorageV1().VolumeAttachments().Delete(s.ctx, va.Name, metav1.DeleteOptions{}))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "the fenced unpublish from "+nodeA, func(context.Context) (bool, error) {
		return s.fenceIndex(s.audit(), nodeA) >= 0, nil
	}))
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain unpublishes from %s of a volume it still listed in use", n, nodeA)
	}
	if n := audit.Count(recs, audit.Method("ControllerPublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK()); n != 1 {
		t.Fatalf("%d successful publishes of %s to %s, want only the first: a fenced node gets nothing back before its clean-up", n, s.handle, nodeA)
	}

	must(t, s.w.AddTaint(s.ctx, nodeA, world.OutOfServiceTaint))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
}

// attachment returns the VolumeAttachment of the db volume to node.
func (s *scenario) attachment(node string) *storagev1.VolumeAttachment {
	s.t.Helper()
	vas, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().List(s.ctx, metav1.ListOptions{})
	must(s.t, err)
	for i := range vas.Items {
		va := &vas.Items[i]
		if va.Spec.NodeName == node && va.Spec.Attacher == world.DriverName && va.Status.Attached {
			return va
		}
	}
	s.t.Fatalf("no attached VolumeAttachment on %s", node)
	return nil
}
