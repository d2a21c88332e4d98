package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/rbaccheck"
)

// TestApplyServerDryRun sends every kustomization and every plain manifest to
// a real kube-apiserver with --dry-run=server: the server runs defaulting,
// strict field validation and admission (including Pod Security, "restricted"
// in fenceline-system) without storing anything. A warning fails the test as
// well, since users see warnings as problems.
func TestApplyServerDryRun(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	kc := "--kubeconfig=" + c.AdminKubeconfig()
	root := repoRoot(t)
	// Namespaced objects can be dry-run only into an existing namespace.
	runKubectl(t, kc, "apply", "-k", root+"/deploy/namespace")

	check := func(t *testing.T, args ...string) {
		t.Helper()
		out, errOut := runKubectl(t, append([]string{kc, "apply", "--dry-run=server"}, args...)...)
		if strings.Contains(errOut, "Warning") {
			t.Errorf("kubectl apply %s warned:\n%s", strings.Join(args, " "), errOut)
		}
		if !strings.Contains(out, "(server dry run)") {
			t.Errorf("kubectl apply %s: no server dry run in output:\n%s", strings.Join(args, " "), out)
		}
	}
	for _, dir := range kustomizations(t) {
		t.Run("kustomize "+dir, func(t *testing.T) { check(t, "-k", root+"/"+dir) })
	}
	for _, f := range plainManifests(t) {
		t.Run("file "+f, func(t *testing.T) { check(t, "-f", root+"/"+f) })
	}
}

// TestNamespaces checks with the API server's own discovery that every
// namespaced object names fenceline-system explicitly; otherwise kubectl
// would put it in whatever namespace the user's context points at.
func TestNamespaces(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client().Discovery()))
	for _, dir := range entryPoints {
		t.Run(dir, func(t *testing.T) {
			for _, o := range render(t, dir) {
				gvk := o.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s %s: the API server does not know this kind: %v", gvk, o.GetName(), err)
					continue
				}
				namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
				if namespaced && o.GetNamespace() != fencelineNamespace {
					t.Errorf("%s %s: namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), fencelineNamespace)
				}
				if !namespaced && o.GetNamespace() != "" {
					t.Errorf("cluster-scoped %s %s has namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
				}
			}
		})
	}
}

// permission is one access check for a ServiceAccount.
type permission struct {
	verb, group, resource, subresource, namespace string
}

// upstreamAttacherPermissions is what the upstream external-attacher's RBAC
// grants (deploy/kubernetes/rbac.yaml): a drop-in replacement needs them all.
var upstreamAttacherPermissions = []permission{
	{"get", "", "persistentvolumes", "", ""}, {"list", "", "persistentvolumes", "", ""},
	{"watch", "", "persistentvolumes", "", ""}, {"patch", "", "persistentvolumes", "", ""},
	{"get", "storage.k8s.io", "csinodes", "", ""}, {"list", "storage.k8s.io", "csinodes", "", ""},
	{"watch", "storage.k8s.io", "csinodes", "", ""},
	{"get", "storage.k8s.io", "volumeattachments", "", ""}, {"list", "storage.k8s.io", "volumeattachments", "", ""},
	{"watch", "storage.k8s.io", "volumeattachments", "", ""}, {"patch", "storage.k8s.io", "volumeattachments", "", ""},
	{"patch", "storage.k8s.io", "volumeattachments", "status", ""},
	{"get", "coordination.k8s.io", "leases", "", fencelineNamespace},
	{"create", "coordination.k8s.io", "leases", "", fencelineNamespace},
	{"update", "coordination.k8s.io", "leases", "", fencelineNamespace},
}

// fencingAttacherPermissions are the rules docs/migration.md tells users to
// add to an upstream attacher's RBAC.
var fencingAttacherPermissions = []permission{
	{"get", "", "nodes", "", ""}, {"list", "", "nodes", "", ""}, {"watch", "", "nodes", "", ""},
	{"get", "storage.k8s.io", "csidrivers", "", ""}, {"list", "storage.k8s.io", "csidrivers", "", ""},
	{"watch", "storage.k8s.io", "csidrivers", "", ""},
	{"create", "", "events", "", fencelineNamespace}, {"patch", "", "events", "", fencelineNamespace},
	// VolumeAttachments' Events land in default, claims' in their own namespace.
	{"create", "", "events", "", "default"}, {"create", "", "events", "", "some-app"},
	{"patch", "", "events", "", "some-app"},
}

// TestAttacherRBAC applies deploy/ for real and asks the API server's
// authorizer whether the attacher's ServiceAccount holds everything upstream's
// attacher holds plus the three rules docs/migration.md lists, and nothing
// that would let it touch Pods or Secrets.
func TestAttacherRBAC(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	kc := "--kubeconfig=" + c.AdminKubeconfig()
	runKubectl(t, kc, "apply", "-k", repoRoot(t)+"/deploy")

	user := rbaccheck.ServiceAccountUser(fencelineNamespace, attacherSA)
	allowed := func(t *testing.T, p permission) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return allowedFor(ctx, t, c.Client(), user, p)
	}
	tests := []struct {
		name  string
		perms []permission
		want  bool
	}{
		{"everything upstream's attacher may do", upstreamAttacherPermissions, true},
		{"the rules added for fencing", fencingAttacherPermissions, true},
		{"nothing beyond storage", []permission{
			{"delete", "", "pods", "", ""}, {"get", "", "secrets", "", fencelineNamespace},
			{"patch", "", "nodes", "", ""}, {"delete", "storage.k8s.io", "volumeattachments", "", ""},
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range tc.perms {
				if got := allowed(t, p); got != tc.want {
					t.Errorf("%s may %s %s/%s in %q: %v, want %v", attacherSA, p.verb, p.resource, p.subresource, p.namespace, got, tc.want)
				}
			}
		})
	}
}

// allowedFor asks the API server's authorizer whether the service-account
// user may do p.
func allowedFor(ctx context.Context, t *testing.T, cs kubernetes.Interface, user string, p permission) bool {
	t.Helper()
	ns, _, _ := strings.Cut(strings.TrimPrefix(user, "system:serviceaccount:"), ":")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource, Namespace: p.namespace,
		},
	}}
	res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return res.Status.Allowed
}
