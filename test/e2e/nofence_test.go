package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/world"
)

// TestDriverWithoutFence: the driver cannot fence (--fence=false) and is
// strict. After the out-of-service taint the attacher falls back to a plain
// unpublish and warns with a FenceUnsupported Event; the strict driver
// refuses it while node A still holds the volume, so the volume never
// reaches another node while A could write. Once A is back and cleaned up,
// the plain unpublish succeeds and the pod moves.
func TestDriverWithoutFence(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true, Driver: world.DriverOptions{NoFence: true, StrictUnpublish: true}})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	s.powerOff(nodeA)
	must(t, s.w.AddTaint(s.ctx, nodeA, world.OutOfServiceTaint))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "FenceUnsupported Warning Event", func(ctx context.Context) (bool, error) {
		evs, err := s.w.Cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("reason", "FenceUnsupported").String(),
		})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Type == corev1.EventTypeWarning, nil
	}))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a refused plain unpublish from "+nodeA, func(context.Context) (bool, error) {
		recs := s.audit()
		return audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.Code("FailedPrecondition")) > 0, nil
	}))
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Fenced()); n != 0 {
		t.Fatalf("%d fenced unpublishes sent to a driver without UNPUBLISH_FENCE", n)
	}
	if n := audit.Count(recs, audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.OK(), func(r audit.Record) bool { return r.NodeID != nodeA }); n != 0 {
		t.Fatalf("volume published to another node while %s still holds it", nodeA)
	}

	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.waitNodeCleanedUp(nodeA)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	recs = s.audit()
	unpub := audit.FirstIndex(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK())
	publish := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Node(moved.Spec.NodeName), audit.Volume(s.handle), audit.OK())
	if unpub < 0 || publish < unpub {
		t.Fatalf("unpublish from %s at record %d, publish to %s at record %d: want unpublish first", nodeA, unpub, moved.Spec.NodeName, publish)
	}
	s.assertInvariant(nodeA, moved.Spec.NodeName)
}
