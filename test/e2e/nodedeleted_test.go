package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/test/world"
)

// TestNodeDeletedDetachesFenced is kubernetes-csi/external-attacher#215:
// a node loses power with db-0 on it, its container writing on, and its
// Node object is deleted (a VM removed by its cloud). Pod garbage
// collection removes db-0 and its replacement is scheduled elsewhere, but
// the attach/detach controller keeps the VolumeAttachment to the deleted
// node for its 6-minute wait. node-gone records the fence intent and
// deletes the VolumeAttachment once no pod is bound to the node; the
// attacher detaches it with fence=true, the replacement runs, and none of
// the old node's writes is accepted after the fence.
func TestNodeDeletedDetachesFenced(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	s.t0 = time.Now()
	s.powerOff(nodeA)
	va := s.vaOf(s.ctx, nodeA)
	must(t, s.w.Cluster.Client().CoreV1().Nodes().Delete(s.ctx, nodeA, metav1.DeleteOptions{}))
	deleted := time.Now()
	s.timeline.Add(deleted, "Node %s deleted", nodeA)

	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, 3*time.Minute)
	must(t, err)
	t.Logf("db-0 Running on %s %s after Node %s was deleted", moved.Spec.NodeName, time.Since(deleted).Round(100*time.Millisecond), nodeA)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	evs, err := s.w.Cluster.Client().CoreV1().Events("default").List(s.ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", va).String(),
	})
	must(t, err)
	var started bool
	for _, e := range evs.Items {
		started = started || e.Reason == actuator.EventDetachStarted
	}
	if !started {
		t.Fatalf("no %s Event on VolumeAttachment %s: who detached it? Events: %v", actuator.EventDetachStarted, va, evs.Items)
	}
}
