package realkubelet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/realkubelet"
	"fenceline.io/fenceline/test/world"
)

// TestVolumeLifecycleOnRealKubelet: a StatefulSet pod pinned to a
// real-kubelet node gets its volume attached by fenceline-attacher, staged
// and published by the real kubelet through the mock driver's node socket
// it registered, and reported in volumesInUse; scaling the StatefulSet
// down unpublishes and unstages it without force, and the detach follows.
func TestVolumeLifecycleOnRealKubelet(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a local control plane (not run with -short)")
	}
	realkubelet.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "real-a"
	w := world.Start(t, world.Options{Nodes: []string{"node-a"}, RealKubelets: []string{node}})
	client := w.Cluster.Client()
	must(t, w.CreateNamespace(ctx, "app"))
	must(t, w.CreateStorageClass(ctx))
	handles, err := w.ProvisionStatefulSet(ctx, "app", "db", 1)
	must(t, err)
	sts := world.StatefulSet("app", "db", 1)
	sts.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	_, err = client.AppsV1().StatefulSets("app").Create(ctx, sts, metav1.CreateOptions{})
	must(t, err)
	pod, err := w.WaitRunning(ctx, "app", "db-0", "", 2*time.Minute)
	must(t, err)
	if pod.Spec.NodeName != node {
		t.Fatalf("db-0 runs on %s, want %s", pod.Spec.NodeName, node)
	}
	recs, err := w.Audit()
	must(t, err)
	for _, m := range []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"} {
		if audit.Count(recs, audit.Method(m), audit.Node(node), audit.Volume(handles[0]), audit.OK()) == 0 {
			t.Fatalf("no successful %s of %s on %s in the audit log", m, handles[0], node)
		}
	}
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + world.DriverName + "^" + handles[0])
	must(t, world.WaitFor(ctx, 30*time.Second, "the volume in volumesInUse of "+node, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && slices.Contains(n.Status.VolumesInUse, unique), nil
	}))

	_, err = client.AppsV1().StatefulSets("app").Patch(ctx, "db", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, world.WaitFor(ctx, 2*time.Minute, "the volume detached from "+node, func(context.Context) (bool, error) {
		recs, err := w.Audit()
		return err == nil && audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.Volume(handles[0]), audit.OK()) > 0, nil
	}))
	recs, err = w.Audit()
	must(t, err)
	last := -1
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
		i := audit.FirstIndex(recs, audit.Method(m), audit.Node(node), audit.Volume(handles[0]), audit.OK())
		if i <= last {
			t.Fatalf("%s of %s on %s at record %d, want after record %d", m, handles[0], node, i, last)
		}
		last = i
	}
	if n := audit.Count(recs, audit.Node(node), audit.Forced()); n != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls; upstream never does", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestKubeletCrashWhilePodDeleted: the kubelet crashes; its pod is deleted
// meanwhile (it stays Terminating: nobody confirms the deletion) while the
// container runs on and writes; the restarted kubelet stops the container,
// unpublishes and unstages without force, and only then is the volume
// detached.
func TestKubeletCrashWhilePodDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a local control plane (not run with -short)")
	}
	realkubelet.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "real-a"
	w := world.Start(t, world.Options{Nodes: []string{"node-a"}, RealKubelets: []string{node}, WriteInterval: 100 * time.Millisecond})
	client := w.Cluster.Client()
	must(t, w.CreateNamespace(ctx, "app"))
	must(t, w.CreateStorageClass(ctx))
	handles, err := w.ProvisionStatefulSet(ctx, "app", "db", 1)
	must(t, err)
	sts := world.StatefulSet("app", "db", 1)
	sts.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	_, err = client.AppsV1().StatefulSets("app").Create(ctx, sts, metav1.CreateOptions{})
	must(t, err)
	_, err = w.WaitRunning(ctx, "app", "db-0", "", 2*time.Minute)
	must(t, err)

	n := w.RealKubelets[node]
	must(t, n.CrashKubelet())
	_, err = client.AppsV1().StatefulSets("app").Patch(ctx, "db", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, world.WaitFor(ctx, 30*time.Second, "db-0 Terminating", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("app").Get(ctx, "db-0", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	}))
	down := time.Now()
	must(t, world.WaitFor(ctx, 30*time.Second, "a write of the container after the kubelet went down", func(context.Context) (bool, error) {
		for _, wr := range n.Writes() {
			if wr.Sent.After(down) && wr.Err == nil {
				return true, nil
			}
		}
		return false, nil
	}))
	recs, err := w.Audit()
	must(t, err)
	if c := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.Volume(handles[0])); c != 0 {
		t.Fatalf("the volume was detached (%d calls) while the kubelet was down and its container wrote", c)
	}
	must(t, n.StartKubelet(ctx))
	must(t, world.WaitFor(ctx, 2*time.Minute, "the volume detached from "+node, func(context.Context) (bool, error) {
		recs, err := w.Audit()
		return err == nil && audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.Volume(handles[0]), audit.OK()) > 0, nil
	}))
	recs, err = w.Audit()
	must(t, err)
	last := -1
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
		i := audit.FirstIndex(recs, audit.Method(m), audit.Node(node), audit.Volume(handles[0]), audit.OK())
		if i <= last {
			t.Fatalf("%s of %s on %s at record %d, want after record %d", m, handles[0], node, i, last)
		}
		last = i
	}
	if c := audit.Count(recs, audit.Node(node), audit.Forced()); c != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls after its restart; upstream never does", c)
	}
}
