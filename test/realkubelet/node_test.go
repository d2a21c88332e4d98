package realkubelet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// TestVolumeLifecycleOnRealKubelet: a StatefulSet pod pinned to a
// real-kubelet node gets its volume attached by fenceline-attacher, staged
// and published by the real kubelet through the mock driver's node socket
// it registered, and reported in volumesInUse; scaling the StatefulSet
// down unpublishes and unstages it without force, and the detach follows.
func TestVolumeLifecycleOnRealKubelet(t *testing.T) {
	const node = "real-a"
	ctx, w := startWorld(t, world.Options{Nodes: []string{"node-a"}, RealKubelets: []string{node}})
	handle := createOn(ctx, t, w, "db", node)
	pod, err := w.WaitRunning(ctx, ns, "db-0", "", 2*time.Minute)
	must(t, err)
	if pod.Spec.NodeName != node {
		t.Fatalf("db-0 runs on %s, want %s", pod.Spec.NodeName, node)
	}
	recs, err := w.Audit()
	must(t, err)
	for _, m := range []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"} {
		if audit.Count(recs, audit.Method(m), audit.Node(node), audit.Volume(handle), audit.OK()) == 0 {
			t.Fatalf("no successful %s of %s on %s in the audit log", m, handle, node)
		}
	}
	unique := nodeutil.CSIUniqueVolumeName(world.DriverName, handle)
	must(t, world.WaitFor(ctx, 30*time.Second, "the volume in volumesInUse of "+node, func(ctx context.Context) (bool, error) {
		n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && slices.Contains(n.Status.VolumesInUse, unique), nil
	}))

	scaleToZero(ctx, t, w, "db")
	waitDetached(ctx, t, w, node, handle)
	assertCleanedUpInOrder(t, w, node, handle)
}

// TestKubeletCrashWhilePodDeleted: the kubelet crashes; its pod is deleted
// meanwhile (it stays Terminating: nobody confirms the deletion) while the
// container runs on and writes; the restarted kubelet stops the container,
// unpublishes and unstages without force, and only then is the volume
// detached.
func TestKubeletCrashWhilePodDeleted(t *testing.T) {
	const node = "real-a"
	ctx, w := startWorld(t, world.Options{Nodes: []string{"node-a"}, RealKubelets: []string{node}, WriteInterval: 100 * time.Millisecond})
	handle := createOn(ctx, t, w, "db", node)
	_, err := w.WaitRunning(ctx, ns, "db-0", "", 2*time.Minute)
	must(t, err)

	n := w.RealKubelets[node]
	must(t, n.CrashKubelet())
	scaleToZero(ctx, t, w, "db")
	must(t, world.WaitFor(ctx, 30*time.Second, "db-0 Terminating", func(ctx context.Context) (bool, error) {
		p, err := w.Cluster.Client().CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	}))
	down := time.Now()
	must(t, world.WaitFor(ctx, 30*time.Second, "a write of the container after the kubelet went down", func(context.Context) (bool, error) {
		return slices.ContainsFunc(n.Writes(), func(wr kubelet.Write) bool { return wr.Sent.After(down) && wr.Err == nil }), nil
	}))
	recs, err := w.Audit()
	must(t, err)
	if c := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.Volume(handle)); c != 0 {
		t.Fatalf("the volume was detached (%d calls) while the kubelet was down and its container wrote", c)
	}
	must(t, n.StartKubelet(ctx))
	waitDetached(ctx, t, w, node, handle)
	assertCleanedUpInOrder(t, w, node, handle)
}
