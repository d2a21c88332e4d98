package actuator_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
)

const ns = "default"

func newPod(t *testing.T, a *actuator.Actuator, name string) *v1.Pod {
	t.Helper()
	p := testobj.Pod(ns, name, testobj.OnNode("n1"))
	p.UID, p.Status = "", v1.PodStatus{}
	created, err := a.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func TestForceDeletePodIntegration(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(100)
	a := &actuator.Actuator{Client: c.Client(), Recorder: rec, Metrics: m}
	ctx := t.Context()
	pods := c.Client().CoreV1().Pods(ns)

	t.Run("replacement with the same name survives", func(t *testing.T) {
		old := newPod(t, a, "sts-0")
		if err := pods.Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		// A StatefulSet controller recreates the pod under the same name.
		replacement := newPod(t, a, "sts-0")
		if err := a.ForceDeletePod(ctx, old, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: always}); err != nil {
			t.Fatalf("ForceDeletePod of a replaced pod must succeed, got %v", err)
		}
		cur, err := pods.Get(ctx, "sts-0", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("replacement pod is gone: %v", err)
		}
		if cur.UID != replacement.UID || cur.DeletionTimestamp != nil || cur.Status.Phase == v1.PodFailed {
			t.Errorf("replacement pod was touched: uid %s (want %s), deletion %v, phase %s", cur.UID, replacement.UID, cur.DeletionTimestamp, cur.Status.Phase)
		}
	})

	t.Run("pod already gone is success", func(t *testing.T) {
		p := newPod(t, a, "gone")
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		if err := a.ForceDeletePod(ctx, p, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: always}); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	})

	t.Run("force deletion removes the pod at once", func(t *testing.T) {
		p := newPod(t, a, "victim")
		if err := a.ForceDeletePod(ctx, p, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Trigger: time.Now(), Recheck: always}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("pod still there after force deletion: %v", err)
		}
	})

	t.Run("dry run changes nothing", func(t *testing.T) {
		dry := *a
		dry.DryRun = true
		p := newPod(t, a, "dry")
		if err := dry.ForceDeletePod(ctx, p, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "test", Recheck: always}); err != nil {
			t.Fatal(err)
		}
		node := testobj.Node("dry-node", testobj.VolumesInUse(nodeutil.CSIUniqueVolumeName("d", "h")))
		node.UID = ""
		created, err := a.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := dry.AddTaint(ctx, created, v1.Taint{Key: "example.com/x", Effect: v1.TaintEffectNoSchedule}, "test", func(*v1.Node) (bool, string) { return true, "" }); err != nil {
			t.Fatal(err)
		}
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.DeletionTimestamp != nil || cur.Status.Phase == v1.PodFailed {
			t.Errorf("dry run touched the pod: %v %+v", err, cur)
		}
		n, err := a.Client.CoreV1().Nodes().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil || nodeutil.HasTaint(n, "example.com/x") {
			t.Errorf("dry run tainted the node: %v %+v", err, n.Spec.Taints)
		}
	})
}
