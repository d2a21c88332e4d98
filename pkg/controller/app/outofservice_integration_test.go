package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// removalBarrier proves the taint-removal queue handled everything enqueued
// before it: a fresh node that is down with the taint must get its boot ID
// recorded.
func (e *env) removalBarrier() {
	e.t.Helper()
	name := fmt.Sprintf("rb-%d", time.Now().UnixNano())
	e.createNode(name, false, testobj.BootID("boot-"+name), testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	e.waitFor("boot ID of "+name+" recorded", func(ctx context.Context) (bool, error) {
		_, ok := e.node(name).Annotations[names.BootIDAnnotation]
		return ok, nil
	})
}

func TestOutOfServiceTaintRemovalIntegration(t *testing.T) {
	opts := testOptions("podgc")
	opts.RemoveOutOfServiceTaint = true
	e := startEnv(t, opts)
	oos := func(node string) { e.addTaint(node, names.OutOfServiceTaint, v1.TaintEffectNoExecute) }
	recorded := func(node string) (string, bool) {
		v, ok := e.node(node).Annotations[names.BootIDAnnotation]
		return v, ok
	}

	t.Run("removed only after a reboot, with no terminating pod and no VolumeAttachment", func(t *testing.T) {
		e.createNode("oos-1", false, testobj.BootID("boot-a"))
		held := e.createStuckPod("oos-1-held", "oos-1", withFinalizer())
		oos("oos-1")
		e.waitFor("boot ID recorded", func(context.Context) (bool, error) {
			v, ok := recorded("oos-1")
			return ok && strings.HasPrefix(v, "boot-a@"), nil
		})
		// Ready again with the same boot ID: no proven power cycle.
		e.setReady("oos-1", true)
		e.removalBarrier()
		if !nodeutil.HasTaint(e.node("oos-1"), names.OutOfServiceTaint) {
			t.Fatal("taint removed without a reboot")
		}
		e.updateNode("oos-1", true, func(n *v1.Node) { n.Status.NodeInfo.BootID = "boot-b" })
		va := e.createVA("va-oos-1", "mock.fenceline.io", "pv-oos-1", "oos-1")
		e.removalBarrier()
		if !nodeutil.HasTaint(e.node("oos-1"), names.OutOfServiceTaint) {
			t.Fatal("taint removed while a pod is terminating and a VolumeAttachment remains")
		}
		e.removeFinalizers(held)
		e.waitPodGone(held)
		e.removalBarrier()
		if !nodeutil.HasTaint(e.node("oos-1"), names.OutOfServiceTaint) {
			t.Fatal("taint removed while a VolumeAttachment remains")
		}
		if err := e.admin.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitTaint("oos-1", names.OutOfServiceTaint, false)
		e.waitEvent("Node", "", "oos-1", "", actuator.EventUntainted)
		e.waitFor("boot ID record cleared", func(context.Context) (bool, error) {
			_, ok := recorded("oos-1")
			return !ok, nil
		})
	})

	t.Run("taint never seen while the node was down: never removed", func(t *testing.T) {
		e.createNode("oos-2", true, testobj.BootID("boot-a"))
		oos("oos-2")
		e.updateNode("oos-2", true, func(n *v1.Node) { n.Status.NodeInfo.BootID = "boot-b" })
		e.removalBarrier()
		n := e.node("oos-2")
		if !nodeutil.HasTaint(n, names.OutOfServiceTaint) {
			t.Error("taint removed although it was never seen while the node was down")
		}
		if _, ok := n.Annotations[names.BootIDAnnotation]; ok {
			t.Error("boot ID recorded for a Ready node")
		}
	})
}

// TestOutOfServiceStaleBootRecordIntegration: the boot ID recorded in one
// out-of-service episode proves nothing about a later one. The controller
// is down while the first taint is removed, so the record outlives it; the
// node then reboots and gets a new taint while Ready: no proof of a reboot
// for this taint, so it stays.
func TestOutOfServiceStaleBootRecordIntegration(t *testing.T) {
	opts := testOptions("podgc")
	opts.RemoveOutOfServiceTaint = true
	e := newEnv(t)
	stop := e.runController(opts)

	e.createNode("oos-3", false, testobj.BootID("boot-a"))
	e.addTaint("oos-3", names.OutOfServiceTaint, v1.TaintEffectNoExecute)
	var record string
	e.waitFor("boot ID recorded for the first taint", func(context.Context) (bool, error) {
		record = e.node("oos-3").Annotations[names.BootIDAnnotation]
		return strings.HasPrefix(record, "boot-a"), nil
	})
	stop()

	// While the controller is down: a human removes the taint, the node
	// reboots and comes back, and a second taint is added while it is Ready.
	e.updateNode("oos-3", false, func(n *v1.Node) { n.Spec.Taints = nil })
	e.updateNode("oos-3", true, func(n *v1.Node) {
		testobj.ReadySince(time.Now())(n)
		n.Status.NodeInfo.BootID = "boot-b"
	})
	// timeAdded has one-second resolution: the second taint is added in a
	// later second than the first, as any real second episode is.
	_, at, _ := strings.Cut(record, "@")
	first, _ := time.Parse(time.RFC3339, at)
	e.waitFor("a later second than the first taint", func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(first), nil
	})
	e.updateNode("oos-3", false, func(n *v1.Node) {
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: names.OutOfServiceTaint, Effect: v1.TaintEffectNoExecute, TimeAdded: &now})
	})
	if got := e.node("oos-3").Annotations[names.BootIDAnnotation]; got != record {
		t.Fatalf("setup: record %q changed to %q while the controller was down", record, got)
	}

	opts.Registry = prometheus.NewRegistry()
	e.runController(opts)
	e.removalBarrier()
	if !nodeutil.HasTaint(e.node("oos-3"), names.OutOfServiceTaint) {
		t.Fatal("out-of-service taint removed on the strength of a boot ID recorded for an earlier taint")
	}
}
