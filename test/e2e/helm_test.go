package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	cs := w.Cluster.Client()
	var metas []metav1.Object
	sas, err := cs.CoreV1().ServiceAccounts(world.Namespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range sas.Items {
		if sas.Items[i].Name != "default" {
			metas = append(metas, &sas.Items[i])
		}
	}
	roles, err := cs.RbacV1().Roles(world.Namespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range roles.Items {
		metas = append(metas, &roles.Items[i])
	}
	rbs, err := cs.RbacV1().RoleBindings(world.Namespace).List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range rbs.Items {
		metas = append(metas, &rbs.Items[i])
	}
	crs, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range crs.Items {
		metas = append(metas, &crs.Items[i])
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range crbs.Items {
		metas = append(metas, &crbs.Items[i])
	}
	seen := 0
	for _, m := range metas {
		if m.GetNamespace() == "" && !strings.HasPrefix(m.GetName(), "fenceline") {
			continue
		}
		seen++
		if got := m.GetAnnotations()["meta.helm.sh/release-name"]; got != helm.ReleaseName {
			t.Errorf("%s/%s is not the release's (meta.helm.sh/release-name %q): RBAC from outside the chart", m.GetNamespace(), m.GetName(), got)
		}
	}
	if seen == 0 {
		t.Fatal("no RBAC object of the release found")
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "fenceline-controller", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Fatal("ClusterRole fenceline-controller missing: the chart installed no controller RBAC")
	}
}
