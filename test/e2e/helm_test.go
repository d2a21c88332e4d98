package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/helm"
	"fenceline.io/fenceline/test/world"
)

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
	inst := &helm.Installer{Values: helmTestValues()}
	s := newFencingScenarioWith(t, world.Options{Installer: inst}, world.BMCRedfish, nil)
	if got := len(s.w.Controllers); got != 2 {
		t.Fatalf("%d fenceline-controller processes, want the chart's 2 replicas", got)
	}
	assertOnlyReleaseRBAC(s.ctx, t, s.w)

	nodeA := s.startDB().Spec.NodeName
	req := s.fenceAndMove(nodeA)
	s.powerOnUnfenced(nodeA)

	must(t, helm.Uninstall(s.w.Cluster))
	deps, err := s.w.Cluster.Client().AppsV1().Deployments(world.Namespace).List(s.ctx, metav1.ListOptions{})
	must(t, err)
	if len(deps.Items) != 0 {
		t.Fatalf("%d deployments left in %s after helm uninstall", len(deps.Items), world.Namespace)
	}
	// A chart's crds/ are never deleted by Helm: the fencing history and
	// the FenceTargets outlive the release.
	if _, err := s.setup.Client.FencingV1alpha1().FencingRequests().Get(s.ctx, req.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("FencingRequest %s after helm uninstall: %v (want kept with its CRD)", req.Name, err)
	}
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
