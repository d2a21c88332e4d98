package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/names"
)

const holdFinalizer = "test.fenceline.io/hold"

func withFinalizer() testobj.PodOption {
	return func(p *v1.Pod) { p.Finalizers = append(p.Finalizers, holdFinalizer) }
}

// oosBarrier proves that the podgc queue handled everything enqueued before
// it: a fresh out-of-service node with a stuck pod, whose deletion (one FIFO
// worker) comes after every earlier event.
func (e *env) oosBarrier() {
	e.t.Helper()
	name := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	e.createNode(name, false, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	e.waitPodGone(e.createStuckPod(name, name))
}

func TestPodGCIntegration(t *testing.T) {
	e := startEnv(t, testOptions(podgc.Name))
	oos := func(node string) { e.addTaint(node, names.OutOfServiceTaint, v1.TaintEffectNoExecute) }

	t.Run("taint on a NotReady node force-deletes its stuck pods with an Event", func(t *testing.T) {
		e.createNode("gc-1", false)
		p := e.createStuckPod("gc-1-a", "gc-1")
		q := e.createStuckPod("gc-1-b", "gc-1", testobj.Mirror())
		oos("gc-1")
		e.waitPodGone(p)
		e.waitPodGone(q)
		ev := e.waitEvent("Pod", ns, p.Name, p.UID, actuator.EventForceDeleted)
		if !strings.Contains(ev.Message, "out of service") {
			t.Errorf("event message %q does not say why", ev.Message)
		}
		if got := e.metricValue("pod_gc_collector_force_delete_pods_total", ns, "out-of-service"); got < 2 {
			t.Errorf("pod_gc_collector_force_delete_pods_total{reason=out-of-service} = %v, want >= 2", got)
		}
	})

	t.Run("pod is marked Failed with a DisruptionTarget condition and deleted with grace 0", func(t *testing.T) {
		e.createNode("gc-2", false, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
		p := e.createStuckPod("gc-2-a", "gc-2", withFinalizer())
		t.Cleanup(func() { e.removeFinalizers(p) })
		e.waitFor("force deletion", func(ctx context.Context) (bool, error) {
			cur, err := e.admin.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return cur.DeletionGracePeriodSeconds != nil && *cur.DeletionGracePeriodSeconds == 0, nil
		})
		cur, err := e.admin.CoreV1().Pods(ns).Get(e.ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed", cur.Status.Phase)
		}
		var found bool
		for _, c := range cur.Status.Conditions {
			if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == actuator.DisruptionReason && strings.Contains(c.Message, "fenceline: node gc-2 out of service") {
				found = true
			}
		}
		if !found {
			t.Errorf("no DisruptionTarget condition explaining the deletion: %+v", cur.Status.Conditions)
		}
	})

	t.Run("node going NotReady after the taint triggers the deletion", func(t *testing.T) {
		e.createNode("gc-3", true, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
		p := e.createStuckPod("gc-3-a", "gc-3")
		e.oosBarrier()
		if !e.podExists(p) {
			t.Fatal("pod on a Ready node was deleted")
		}
		e.setReady("gc-3", false)
		e.waitPodGone(p)
	})

	t.Run("pod becoming terminating on a tainted node is deleted; running pods are not", func(t *testing.T) {
		e.createNode("gc-4", false, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
		running := e.createPod("gc-4-running", "gc-4")
		later := e.createPod("gc-4-later", "gc-4")
		e.oosBarrier()
		if !e.podExists(running) || !e.podExists(later) {
			t.Fatal("a pod that is not terminating was deleted")
		}
		e.terminate(later)
		e.waitPodGone(later)
		e.oosBarrier()
		if !e.podExists(running) {
			t.Error("running pod was deleted")
		}
	})

	t.Run("no taint: stuck pods stay", func(t *testing.T) {
		e.createNode("gc-5", false, testobj.Taint("example.com/other", v1.TaintEffectNoExecute))
		p := e.createStuckPod("gc-5-a", "gc-5")
		e.oosBarrier()
		if !e.podExists(p) {
			t.Error("pod on a node without the out-of-service taint was deleted")
		}
	})
}
