package realkubelet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/realkubelet"
	"fenceline.io/fenceline/test/world"
)

// ns is the namespace of the tests' StatefulSets.
const ns = "app"

// startWorld starts a world with the real-kubelet nodes of opts, and the
// namespace and StorageClass of the tests; it skips where a real kubelet
// cannot run. The context ends with the test, at the latest in 4 minutes.
func startWorld(t *testing.T, opts world.Options) (context.Context, *world.World) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local control plane (not run with -short)")
	}
	realkubelet.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	w := world.Start(t, opts)
	must(t, w.CreateNamespace(ctx, ns))
	must(t, w.CreateStorageClass(ctx))
	return ctx, w
}

// createOn creates StatefulSet name of one pod with its own RWO volume,
// pinned to node by a node selector, and returns the volume's handle.
func createOn(ctx context.Context, t *testing.T, w *world.World, name, node string) string {
	t.Helper()
	handles, err := w.ProvisionStatefulSet(ctx, ns, name, 1)
	must(t, err)
	sts := world.StatefulSet(ns, name, 1)
	sts.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	_, err = w.Cluster.Client().AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	must(t, err)
	return handles[0]
}

// scaleToZero deletes StatefulSet name's pod by scaling it down.
func scaleToZero(ctx context.Context, t *testing.T, w *world.World, name string) {
	t.Helper()
	_, err := w.Cluster.Client().AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	must(t, err)
}

// detached reports whether the driver's audit log has a successful
// ControllerUnpublishVolume of handle from node.
func detached(recs []audit.Record, node, handle string) bool {
	return audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.Volume(handle), audit.OK()) > 0
}

// waitDetached waits until the volume is detached from node.
func waitDetached(ctx context.Context, t *testing.T, w *world.World, node, handle string) {
	t.Helper()
	must(t, world.WaitFor(ctx, 2*time.Minute, "the volume detached from "+node, func(context.Context) (bool, error) {
		recs, err := w.Audit()
		return err == nil && detached(recs, node, handle), nil
	}))
}

// assertCleanedUpInOrder checks the audit log for the end of the volume's
// life on node: NodeUnpublishVolume, then NodeUnstageVolume, then the
// detach, and no node call with force, which upstream never sends.
func assertCleanedUpInOrder(t *testing.T, w *world.World, node, handle string) {
	t.Helper()
	recs, err := w.Audit()
	must(t, err)
	last := -1
	for _, m := range []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
		i := audit.FirstIndex(recs, audit.Method(m), audit.Node(node), audit.Volume(handle), audit.OK())
		if i <= last {
			t.Fatalf("%s of %s on %s at record %d, want after record %d", m, handle, node, i, last)
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
