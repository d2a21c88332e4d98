// Package e2e holds the end-to-end story of the Helm chart: the product
// installed with the chart, through a failover, on a real local control
// plane. It lives in the test/helm module with the Helm library, apart from
// test/e2e; the checks of the failover are test/world's, which test/e2e
// makes too. It skips under -short.
package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/helm"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

// Deadlines of the story, test/e2e's: generous upper bounds for a loaded
// CI machine, not performance goals.
const (
	storyTimeout    = 4 * time.Minute
	startTimeout    = 60 * time.Second
	fenceTimeout    = 60 * time.Second
	failoverTimeout = 90 * time.Second
	nodeLostTimeout = 30 * time.Second
)

// ns is the namespace of the story's StatefulSet "db".
const ns = "app"

// helmTestValues are the values an operator of this test cluster would
// install with: the controller's force-eviction grace matched to the
// cluster's node-monitor grace period (as its flag asks), the fence
// agent's BMC probe every few seconds, verbose logs. Everything else is
// the chart's default: two replicas of each behind leader election, the
// chart's RBAC, the fence agent reading BMC credentials from the release
// namespace.
func helmTestValues() map[string]any {
	return map[string]any{
		"controller": map[string]any{
			"verbosity": 4,
			"extraArgs": []any{"--force-eviction-ready-grace=" + cluster.NodeMonitorGracePeriod.String()},
		},
		"fenceAgent": map[string]any{"verbosity": 4, "probeInterval": "5s"},
	}
}

// TestHelmInstallFailover installs Fenceline with its Helm chart as
// docs/helm.md tells an operator to (the restricted namespace, then helm
// install --wait), runs fenceline-controller and fenceline-fence-agent as
// the installed Deployments say (their arguments, ServiceAccounts,
// replicas and liveness probes) and fenceline-attacher under the chart's
// ServiceAccount, and then passes the node-fencing failover with no human:
// verified power-off, the volume fenced off the dead node before it
// moves, never two writers, the node unfenced when it is back. No RBAC
// from deploy/ is applied, so the chart's RBAC alone carries it. Then helm
// uninstall removes the workloads and keeps the CRDs and the fencing
// history, as Helm does with a chart's crds/.
func TestHelmInstallFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), storyTimeout)
	t.Cleanup(cancel)
	w := world.Start(t, world.Options{
		Installer:     &helm.Installer{Values: helmTestValues()},
		Fencing:       true,
		WriteInterval: 100 * time.Millisecond,
	})
	tl, t0 := &world.Timeline{}, time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			if recs, err := w.Audit(); err == nil {
				tl.AddAudit(recs)
			}
			t.Logf("timeline (seconds from the lost heartbeats or start):\n%s", tl.Format(t0))
		}
	})
	setup, handle := startFencedStatefulSet(ctx, t, w, tl)
	if got := len(w.Controllers); got != 2 {
		t.Fatalf("%d fenceline-controller processes, want the chart's 2 replicas", got)
	}
	assertOnlyReleaseRBAC(ctx, t, w)

	_, err := w.Cluster.Client().AppsV1().StatefulSets(ns).Create(ctx, world.StatefulSet(ns, "db", 1), metav1.CreateOptions{})
	must(t, err)
	pod, err := w.WaitRunning(ctx, ns, "db-0", "", startTimeout)
	must(t, err)
	nodeA := pod.Spec.NodeName
	must(t, w.WaitAcceptedWrite(ctx, nodeA, time.Time{}, startTimeout))

	// The node stops heartbeating while its pod keeps writing: a fenced
	// power-off with a read-back proof, then db-0 moved with its volume
	// fenced off the node first.
	t0 = time.Now()
	tl.Add(t0, "node %s stops heartbeating; its pod keeps writing", nodeA)
	must(t, w.Partition(ctx, nodeA))
	req, err := setup.WaitRequestPhase(ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	// API times have a resolution of a second: the moment the test saw
	// the request Fenced is a bound after the verified power-off.
	seenFenced := time.Now()
	tl.Add(seenFenced, "FencingRequest %s seen Fenced", req.Name)
	must(t, world.CheckFenceProof(req, setup.BMCs[nodeA]))
	moved, err := w.WaitRunning(ctx, ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	nodeB := moved.Spec.NodeName
	tl.Add(time.Now(), "db-0 Running on %s", nodeB)
	must(t, w.WaitAcceptedWrite(ctx, nodeB, time.Now(), startTimeout))
	must(t, w.CheckNoWriteAfterFence(handle, nodeA, nodeB, seenFenced))
	must(t, w.CheckFailoverTo(invariant.Failover{Volume: handle, From: nodeA, CutOff: t0}, nodeB))

	// Powered on again through its BMC (a new boot ID), the node is
	// unfenced with no human.
	dev, err := setup.BMCs[nodeA].Device()
	must(t, err)
	must(t, dev.On(ctx))
	_, err = setup.WaitRequestPhase(ctx, nodeA, fencingv1alpha1.FencingPhaseRecovered, failoverTimeout)
	must(t, err)
	must(t, w.WaitUnfenced(ctx, nodeA, nodeLostTimeout))

	must(t, helm.Uninstall(w.Cluster))
	deps, err := w.Cluster.Client().AppsV1().Deployments(world.Namespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(deps.Items) != 0 {
		t.Fatalf("%d deployments left in %s after helm uninstall", len(deps.Items), world.Namespace)
	}
	// A chart's crds/ are never deleted by Helm: the fencing history and
	// the FenceTargets outlive the release.
	if _, err := setup.Client.FencingV1alpha1().FencingRequests().Get(ctx, req.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("FencingRequest %s after helm uninstall: %v (want kept with its CRD)", req.Name, err)
	}
}

// startFencedStatefulSet prepares the story on w: the namespace ns with its
// Events on tl, the StorageClass, the volume of a StatefulSet "db" of one
// pod (not created yet), and a Redfish BMC and FenceTarget per node with
// the test FencePolicy. It returns the fencing set-up and the volume's
// handle.
func startFencedStatefulSet(ctx context.Context, t *testing.T, w *world.World, tl *world.Timeline) (*world.FencingSetup, string) {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	must(t, w.CreateNamespace(ctx, ns))
	tl.Watch(w.Cluster.Client(), ns, stop)
	must(t, w.CreateStorageClass(ctx))
	handles, err := w.ProvisionStatefulSet(ctx, ns, "db", 1)
	must(t, err)
	setup, err := w.SetUpFencing(ctx, world.BMCRedfish, tl, nil)
	must(t, err)
	t.Cleanup(setup.Close)
	return setup, handles[0]
}

// assertOnlyReleaseRBAC checks that every ServiceAccount, Role and
// RoleBinding in the release namespace, and every ClusterRole and
// ClusterRoleBinding named fenceline*, belongs to the Helm release: the
// components ran with nothing but the chart's permissions.
func assertOnlyReleaseRBAC(ctx context.Context, t *testing.T, w *world.World) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(w.Cluster.AdminConfig())
	must(t, err)
	rbac := func(resource string) schema.GroupVersionResource {
		return rbacv1.SchemeGroupVersion.WithResource(resource)
	}
	seen := 0
	for _, r := range []struct {
		gvr       schema.GroupVersionResource
		namespace string // "" for cluster-scoped kinds, of which only fenceline* count
	}{
		{corev1.SchemeGroupVersion.WithResource("serviceaccounts"), world.Namespace},
		{rbac("roles"), world.Namespace},
		{rbac("rolebindings"), world.Namespace},
		{rbac("clusterroles"), ""},
		{rbac("clusterrolebindings"), ""},
	} {
		list, err := dyn.Resource(r.gvr).Namespace(r.namespace).List(ctx, metav1.ListOptions{})
		must(t, err)
		for _, o := range list.Items {
			if (r.namespace == "" && !strings.HasPrefix(o.GetName(), "fenceline")) || (r.gvr.Resource == "serviceaccounts" && o.GetName() == "default") {
				continue
			}
			seen++
			if got := o.GetAnnotations()["meta.helm.sh/release-name"]; got != helm.ReleaseName {
				t.Errorf("%s %s/%s is not the release's (meta.helm.sh/release-name %q): RBAC from outside the chart", r.gvr.Resource, o.GetNamespace(), o.GetName(), got)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no RBAC object of the release found")
	}
	if _, err := w.Cluster.Client().RbacV1().ClusterRoles().Get(ctx, "fenceline-controller", metav1.GetOptions{}); err != nil {
		t.Fatalf("ClusterRole fenceline-controller: %v (the chart installs the controller's RBAC)", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
