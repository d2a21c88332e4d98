package deploy

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/test/cluster"
)

// docPatch is one `kubectl patch` command quoted in a document.
type docPatch struct {
	Namespace, Kind, Name, Type, Patch string
}

var patchCommand = regexp.MustCompile(`(?s)kubectl (?:-n (\S+) )?patch (\S+) (\S+) --type=(\w+) -p '([^']*)'`)

// docPatches extracts the kubectl patch commands of a Markdown file, in order.
func docPatches(t testing.TB, rel string) []docPatch {
	t.Helper()
	var out []docPatch
	for _, m := range patchCommand.FindAllStringSubmatch(readRepoFile(t, rel), -1) {
		out = append(out, docPatch{Namespace: m[1], Kind: m[2], Name: m[3], Type: m[4], Patch: m[5]})
	}
	return out
}

func (p docPatch) apply(t *testing.T, kubeconfig string) {
	t.Helper()
	args := []string{"--kubeconfig=" + kubeconfig}
	if p.Namespace != "" {
		args = append(args, "-n", p.Namespace)
	}
	runKubectl(t, append(args, "patch", p.Kind, p.Name, "--type="+p.Type, "-p", p.Patch)...)
}

// TestMigrationDoc runs the commands of docs/migration.md against a real API
// server: the RBAC patch on upstream's ClusterRole, the switch of an upstream
// csi-attacher sidecar to fenceline-attacher, and the switch back.
func TestMigrationDoc(t *testing.T) {
	patches := docPatches(t, "docs/migration.md")
	if len(patches) != 3 {
		t.Fatalf("docs/migration.md has %d kubectl patch commands, want 3 (RBAC, switch, switch back)", len(patches))
	}
	rbacPatch, switchPatch, backPatch := patches[0], patches[1], patches[2]

	c := cluster.Start(t, cluster.Options{})
	kubeconfig := c.AdminKubeconfig()
	cs := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Upstream external-attacher's RBAC, as its deploy/kubernetes/rbac.yaml
	// installs it, for the sidecar's ServiceAccount kube-system/csi-attacher.
	const upstreamUser = "system:serviceaccount:kube-system:csi-attacher"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: rbacPatch.Name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments/status"}, Verbs: []string{"patch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-attacher-role"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "csi-attacher", Namespace: "kube-system"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("RBAC patch adds the three rules", func(t *testing.T) {
		fencing := []permission{
			{"watch", "", "nodes", "", ""}, {"list", "storage.k8s.io", "csidrivers", "", ""},
			{"create", "", "events", "", "default"}, {"patch", "", "events", "", "default"},
		}
		for _, p := range fencing {
			if allowedFor(ctx, t, cs, upstreamUser, p) {
				t.Fatalf("%s may already %s %s before the patch; the test proves nothing", upstreamUser, p.verb, p.resource)
			}
		}
		rbacPatch.apply(t, kubeconfig)
		want := fencing
		for _, p := range upstreamAttacherPermissions {
			if p.namespace == "" { // the lease rules live in upstream's Role, not here
				want = append(want, p)
			}
		}
		for _, p := range want {
			if !allowedFor(ctx, t, cs, upstreamUser, p) {
				t.Errorf("after the documented patch %s may not %s %s/%s", upstreamUser, p.verb, p.resource, p.subresource)
			}
		}
	})

	// A driver controller with upstream's sidecar, named as in the document.
	const upstreamImage = "registry.k8s.io/sig-storage/csi-attacher:v4.13.0"
	sidecarArgs := []string{"--v=5", "--csi-address=/csi/csi.sock", "--leader-election"}
	labels := map[string]string{"app": switchPatch.Name}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: switchPatch.Namespace, Name: switchPatch.Name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "hostpath", Image: "registry.k8s.io/sig-storage/hostpathplugin:v1.17.0", Args: []string{"--endpoint=unix:///csi/csi.sock"}},
					{Name: "csi-attacher", Image: upstreamImage, Args: sidecarArgs},
				}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(deploy.Namespace).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sidecar := func(t *testing.T) (attacher, driver corev1.Container) {
		t.Helper()
		d, err := cs.AppsV1().Deployments(deploy.Namespace).Get(ctx, deploy.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs := d.Spec.Template.Spec.Containers
		if len(cs) != 2 || cs[1].Name != "csi-attacher" {
			t.Fatalf("containers after the patch: %+v", cs)
		}
		return cs[1], cs[0]
	}

	t.Run("switch to fenceline-attacher keeps the arguments", func(t *testing.T) {
		switchPatch.apply(t, kubeconfig)
		a, d := sidecar(t)
		if !strings.Contains(a.Image, "fenceline") || !slices.Equal(a.Command, []string{"/fenceline-attacher"}) {
			t.Errorf("sidecar runs %s %q, want the fenceline image and /fenceline-attacher", a.Image, a.Command)
		}
		if !slices.Equal(a.Args, sidecarArgs) {
			t.Errorf("sidecar args %q, want them unchanged: %q", a.Args, sidecarArgs)
		}
		if d.Name != "hostpath" || d.Image != deploy.Spec.Template.Spec.Containers[0].Image {
			t.Errorf("driver container changed: %+v", d)
		}
	})

	t.Run("switch back restores upstream", func(t *testing.T) {
		backPatch.apply(t, kubeconfig)
		a, _ := sidecar(t)
		if a.Image != upstreamImage || len(a.Command) != 0 || !slices.Equal(a.Args, sidecarArgs) {
			t.Errorf("sidecar after switching back: image %s, command %q, args %q; want %s, none, %q", a.Image, a.Command, a.Args, upstreamImage, sidecarArgs)
		}
	})
}
