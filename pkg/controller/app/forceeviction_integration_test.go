package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
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

// renewLease plays a live kubelet's heartbeat: it creates the node's Lease
// in kube-node-lease and renews it every 200 ms until the test ends.
func (e *env) renewLease(node string) {
	e.t.Helper()
	leases := e.admin.CoordinationV1().Leases(v1.NamespaceNodeLease)
	l := testobj.Lease(node, time.Now())
	if _, err := leases.Create(e.ctx, l, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating Lease of %s: %v", node, err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, false, func(ctx context.Context) (bool, error) {
			cur, err := leases.Get(ctx, node, metav1.GetOptions{})
			if err == nil {
				cur.Spec.RenewTime = ptr.To(metav1.NowMicro())
				_, _ = leases.Update(ctx, cur, metav1.UpdateOptions{})
			}
			return false, nil
		})
	}()
}

func TestForceEvictionIntegration(t *testing.T) {
	o := testOptions(forceeviction.Name)
	grace := 2 * time.Second
	o.Settings[forceeviction.Name].(*forceeviction.Settings).ReadyGrace = grace
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

	t.Run("kubelet posts a short NotReady while its Lease renews: nothing evicted", func(t *testing.T) { testLeaseKeepsAlive(t, e, o, evict) })

	t.Run("node returns mid-eviction: no more evictions, taint kept until the evicted pods' volumes are detached", func(t *testing.T) { testReturnMidEviction(t, e, evict) })
}

// testLeaseKeepsAlive: a kubelet that reports NotReady itself but keeps
// renewing its Lease is alive; nothing is evicted.
func testLeaseKeepsAlive(t *testing.T, e *env, o app.Options, evict func(string)) {
	e.createNode("fe-5", true)
	e.renewLease("fe-5")
	p := e.createPod("fe-5-a", "fe-5")
	evict("fe-5")
	e.setReady("fe-5", false) // the kubelet itself reports NotReady
	notReadyAt := time.Now()
	e.evictionBarrier()
	if !e.podExists(p) {
		t.Fatal("pod evicted although the kubelet renews its Lease")
	}
	// Still alive once a heartbeat from before the NotReady would be stale.
	e.waitFor("a Lease renewal past the grace period", func(ctx context.Context) (bool, error) {
		l, err := e.admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "fe-5", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(notReadyAt.Add(o.Settings[forceeviction.Name].(*forceeviction.Settings).ReadyGrace)), err
	})
	e.evictionBarrier()
	if !e.podExists(p) {
		t.Fatal("pod evicted although the kubelet kept renewing its Lease")
	}
	if !nodeutil.HasTaint(e.node("fe-5"), names.ForceEvictionTaint) {
		t.Error("taint removed while the kubelet still reports NotReady")
	}
	e.setReady("fe-5", true) // the blip ends: nothing was evicted, the taint goes
	e.waitTaint("fe-5", names.ForceEvictionTaint, false)
	if !e.podExists(p) {
		t.Error("pod evicted after the blip")
	}
}

// testReturnMidEviction: a kubelet back mid-eviction stops it; the taint
// stays until the evicted pods' VolumeAttachments are gone.
func testReturnMidEviction(t *testing.T, e *env, evict func(string)) {
	claim, _ := e.volume("fe6", "mock.fenceline.io", v1.ReadWriteOnce)
	kept, _ := e.volume("fe6-kept", "mock.fenceline.io", v1.ReadWriteOnce)
	e.createNode("fe-6", false)
	evicted := e.createPod("fe-6-data", "fe-6", testobj.Claim("data", claim))
	// A finalizer holds a second pod, so the eviction cannot complete.
	held := e.createPod("fe-6-held", "fe-6", withFinalizer())
	t.Cleanup(func() { e.removeFinalizers(held) })
	tolerating := e.createPod("fe-6-tolerating", "fe-6", testobj.Tolerate(names.ForceEvictionTaint), testobj.Claim("data", kept))
	va := e.createVA("va-fe-6", "mock.fenceline.io", "pv-"+claim, "fe-6")
	e.createVA("va-fe-6-kept", "mock.fenceline.io", "pv-"+kept, "fe-6")
	evict("fe-6")
	e.waitPodGone(evicted)
	e.setReady("fe-6", true) // the kubelet is back mid-eviction
	late := e.createPod("fe-6-late", "fe-6")
	e.evictionBarrier()
	if !e.podExists(late) || !e.podExists(tolerating) {
		t.Error("a pod was deleted after the node returned")
	}
	if !nodeutil.HasTaint(e.node("fe-6"), names.ForceEvictionTaint) {
		t.Fatal("taint removed while the evicted pod's VolumeAttachment remains")
	}
	// Only the evicted pod's detach matters, not the tolerating pod's.
	if err := e.admin.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitTaint("fe-6", names.ForceEvictionTaint, false)
	e.waitFor("evicted-volumes record cleared", func(context.Context) (bool, error) {
		_, ok := e.node("fe-6").Annotations[forceeviction.EvictedVolumesAnnotation]
		return !ok, nil
	})
	if !e.podExists(late) {
		t.Error("pod created after the node returned was deleted")
	}
}
