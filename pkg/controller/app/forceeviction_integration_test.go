package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/testobj"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// evictionBarrier proves the force-eviction queue handled everything
// enqueued before it: a fresh tainted NotReady node whose pod must go.
func (e *env) evictionBarrier() {
	e.t.Helper()
	name := fmt.Sprintf("eb-%d", time.Now().UnixNano())
	// Pod first: a tainted node without pods loses the taint at once.
	e.createNode(name, false)
	p := e.createPod(name, name)
	e.addTaint(name, names.ForceEvictionTaint, v1.TaintEffectNoExecute)
	e.waitPodGone(p)
}

func TestForceEvictionIntegration(t *testing.T) {
	o := testOptions(forceeviction.Name)
	o.ForceEvictionReadyGrace = 2 * time.Second
	e := startEnv(t, o)
	evict := func(node string) { e.addTaint(node, names.ForceEvictionTaint, v1.TaintEffectNoExecute) }
	vol := nodeutil.CSIUniqueVolumeName("mock.fenceline.io", "vol-1")

	t.Run("all pods gone, volumes released, taint removed once detached", func(t *testing.T) {
		e.createNode("fe-1", false, testobj.VolumesInUse(vol), testobj.VolumesAttached(vol))
		running := e.createPod("fe-1-running", "fe-1")
		stuck := e.createStuckPod("fe-1-stuck", "fe-1")
		tolerating := e.createPod("fe-1-tolerating", "fe-1", testobj.Tolerate(names.ForceEvictionTaint))
		va := e.createVA("va-fe-1", "mock.fenceline.io", "pv-fe-1", "fe-1")
		evict("fe-1")
		e.waitPodGone(running)
		e.waitPodGone(stuck)
		ev := e.waitEvent("Pod", ns, running.Name, running.UID, actuator.EventForceDeleted)
		if !strings.Contains(ev.Message, names.ForceEvictionTaint) {
			t.Errorf("event %q does not say why", ev.Message)
		}
		e.waitFor("volumesInUse and volumesAttached cleared", func(context.Context) (bool, error) {
			n := e.node("fe-1")
			return len(n.Status.VolumesInUse) == 0 && len(n.Status.VolumesAttached) == 0, nil
		})
		if !e.podExists(tolerating) {
			t.Error("pod tolerating the taint was deleted")
		}
		// The attacher must still see the taint while it detaches.
		e.evictionBarrier()
		if !nodeutil.HasTaint(e.node("fe-1"), names.ForceEvictionTaint) {
			t.Fatal("taint removed while a VolumeAttachment remains")
		}
		if err := e.admin.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitTaint("fe-1", names.ForceEvictionTaint, false)
		e.waitEvent("Node", "", "fe-1", "", actuator.EventUntainted)
	})

	t.Run("node tainted right after it died: evicted once noticed NotReady", func(t *testing.T) {
		e.createNode("fe-4", true)
		p := e.createPod("fe-4-a", "fe-4")
		evict("fe-4") // the node controller has not noticed yet
		e.setReady("fe-4", false)
		e.waitPodGone(p)
	})

	t.Run("node stays Ready: taint removed after the grace, nothing deleted", func(t *testing.T) {
		e.createNode("fe-2", true, testobj.VolumesInUse(vol))
		p := e.createPod("fe-2-a", "fe-2")
		start := time.Now()
		evict("fe-2")
		e.waitTaint("fe-2", names.ForceEvictionTaint, false)
		if d := time.Since(start); d < time.Second {
			t.Errorf("taint removed after %s, before the 2s grace for the node to be noticed dead", d)
		}
		e.evictionBarrier()
		if !e.podExists(p) {
			t.Error("pod on a Ready node was deleted")
		}
		if n := e.node("fe-2"); len(n.Status.VolumesInUse) != 1 {
			t.Errorf("volumesInUse of a Ready node changed: %v", n.Status.VolumesInUse)
		}
	})

	t.Run("node returns mid-eviction: eviction stops and the taint is removed", func(t *testing.T) {
		e.createNode("fe-3", false, testobj.VolumesInUse(vol))
		// A finalizer holds the first pod, so the eviction cannot complete.
		held := e.createPod("fe-3-held", "fe-3", withFinalizer())
		t.Cleanup(func() { e.removeFinalizers(held) })
		evict("fe-3")
		e.waitFor("held pod force-deleted", func(ctx context.Context) (bool, error) {
			cur, err := e.admin.CoreV1().Pods(ns).Get(ctx, held.Name, metav1.GetOptions{})
			return err == nil && cur.DeletionGracePeriodSeconds != nil && *cur.DeletionGracePeriodSeconds == 0, err
		})
		e.evictionBarrier()
		if !nodeutil.HasTaint(e.node("fe-3"), names.ForceEvictionTaint) {
			t.Fatal("taint removed while a pod remains")
		}
		e.setReady("fe-3", true)
		e.waitTaint("fe-3", names.ForceEvictionTaint, false)
		// The kubelet is back: its pods and volumes are its own again.
		late := e.createPod("fe-3-late", "fe-3")
		e.evictionBarrier()
		if !e.podExists(late) {
			t.Error("pod created after the node returned was deleted")
		}
		if n := e.node("fe-3"); len(n.Status.VolumesInUse) != 1 {
			t.Errorf("volumesInUse changed although the eviction never completed: %v", n.Status.VolumesInUse)
		}
	})
}
