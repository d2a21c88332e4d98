package e2e

import (
	"context"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/world"
)

// TestStrictDriverWaitsForTaint: node A is lost and someone deletes its
// VolumeAttachment early (as some recovery tools do). Without a reason to
// fence, the attacher sends a plain unpublish, which the strict driver
// refuses while A still holds the volume: nothing is detached. When the
// out-of-service taint arrives, the fenced detach goes through.
func TestStrictDriverWaitsForTaint(t *testing.T) {
	s := newScenario(t, world.Options{ZombieWrites: true, Driver: world.DriverOptions{StrictUnpublish: true}})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	s.powerOff(nodeA)

	va := s.attachment(nodeA)
	must(t, s.w.Cluster.Client().StorageV1().VolumeAttachments().Delete(s.ctx, va.Name, metav1.DeleteOptions{}))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a refused plain unpublish from "+nodeA, func(context.Context) (bool, error) {
		return audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.Code("FailedPrecondition")) > 0, nil
	}))
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK()); n != 0 {
		t.Fatalf("volume detached from %s without a reason to fence", nodeA)
	}
	if _, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(s.ctx, va.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("VolumeAttachment %s gone although the detach was refused: %v", va.Name, err)
	}

	taintAt := time.Now()
	must(t, s.w.AddTaint(s.ctx, nodeA, world.OutOfServiceTaint))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "the fenced unpublish from "+nodeA, func(context.Context) (bool, error) {
		return s.fenceIndex(s.audit(), nodeA) >= 0, nil
	}))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "VolumeAttachment "+va.Name+" gone", func(ctx context.Context) (bool, error) {
		_, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}))
	recs = s.audit()
	if f := recs[s.fenceIndex(recs, nodeA)]; f.Time.Before(taintAt) {
		t.Fatalf("fenced unpublish at %s, before the taint at %s", f.Time, taintAt)
	}
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
