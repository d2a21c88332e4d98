package deploy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// TestImageSwapWithUpstreamRBACOnly swaps the image and nothing else: the
// attacher runs with exactly the RBAC of upstream's deploy/kubernetes/rbac.yaml,
// which lets it read neither Nodes nor CSIDrivers. It must still attach and
// detach as upstream does (an informer it may not list would never sync, and
// nothing would be attached), say at default verbosity that fencing is off
// and why, export it as a metric, and tell fenceline-controller through its
// heartbeat that it will not fence, even though the driver can.
func TestImageSwapWithUpstreamRBACOnly(t *testing.T) {
	attacherBin := binary(t, "fenceline-attacher")
	driverBin := binary(t, "mock-driver")
	c := cluster.Start(t, cluster.Options{})
	cs := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const ns, sa = "kube-system", "csi-attacher"
	grantUpstreamAttacherRBAC(ctx, t, c, ns, sa)
	_, kubeconfig := c.ServiceAccountConfig(t, ns, sa)

	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	stateDir := filepath.Join(dir, "state")
	driver, err := cluster.StartProcess("mock-driver", c.LogDir(), driverBin,
		"--endpoint=unix://"+sock, "--state-dir="+stateDir, "--name="+mockDriverName, "--fence",
		"--node-endpoint=node-1=unix://"+filepath.Join(dir, "node-1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	c.Track(driver)
	volumeID := createVolume(ctx, t, sock)

	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", port)
	// Upstream's example arguments at default verbosity, plus what a Pod
	// gets from its environment.
	attacher, err := cluster.StartProcess("fenceline-attacher", c.LogDir(), attacherBin,
		"--csi-address="+sock, "--leader-election", "--leader-election-namespace="+ns,
		"--http-endpoint="+httpAddr, "--kubeconfig="+kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c.Track(attacher)

	createNode(ctx, t, cs, "node-1")
	pv := createPV(ctx, t, cs, "pv-1", volumeID)
	va := attachVA(ctx, t, cs, "va-1", pv.Name, "node-1")

	t.Run("heartbeat says it will not fence", func(t *testing.T) {
		var lease *coordinationv1.Lease
		waitFor(ctx, t, "heartbeat Lease", func(ctx context.Context) (bool, error) {
			lease, err = cs.CoordinationV1().Leases(ns).Get(ctx, names.AttacherHeartbeatLeaseName(mockDriverName), metav1.GetOptions{})
			return err == nil, nil
		})
		if got := lease.Annotations[names.HeartbeatUnpublishFenceAnnotation]; got != "false" {
			t.Errorf("heartbeat %s = %q, want \"false\": the attacher cannot see cut-off nodes", names.HeartbeatUnpublishFenceAnnotation, got)
		}
	})
	t.Run("metrics say blind, the driver's capability stays visible", func(t *testing.T) {
		body := scrape(ctx, t, "http://"+httpAddr+"/metrics")
		for _, want := range []string{"fenceline_attacher_blind 1", `fenceline_attacher_driver_fence_capability{capability="UNPUBLISH_FENCE"} 1`} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})
	t.Run("the log names the missing rules", func(t *testing.T) {
		log, err := os.ReadFile(attacher.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"Fencing is OFF", "list nodes", "watch csidrivers.storage.k8s.io", "create events -n default"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("attacher log lacks %q", want)
			}
		}
	})

	// A node known to be down: upstream's attacher detaches plain, and so
	// does a blind one.
	markNodeDown(ctx, t, cs, "node-1")
	if err := cs.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting VolumeAttachment: %v", err)
	}
	waitFor(ctx, t, "VolumeAttachment detached and gone", func(ctx context.Context) (bool, error) {
		_, err := cs.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	recs, err := audit.ReadFile(filepath.Join(stateDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	unpublish := []audit.Predicate{audit.Method("ControllerUnpublishVolume"), audit.Volume(volumeID), audit.OK()}
	if n := audit.Count(recs, unpublish...); n != 1 {
		t.Errorf("%d successful ControllerUnpublishVolume calls, want 1", n)
	}
	if n := audit.Count(recs, append(unpublish, audit.Fenced())...); n != 0 {
		t.Errorf("a blind attacher sent fence=true %d times; it cannot know the node is cut off", n)
	}
}

// grantUpstreamAttacherRBAC installs upstream external-attacher's RBAC
// (deploy/kubernetes/rbac.yaml of v4.13) for the ServiceAccount ns/sa.
func grantUpstreamAttacherRBAC(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, sa string) {
	t.Helper()
	cs := c.Client()
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "external-attacher-runner"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments/status"}, Verbs: []string{"patch"}},
	}}
	leases := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "external-attacher-cfg", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "watch", "list", "delete", "update", "create"}},
	}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-attacher-role"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, leases, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-attacher-role-cfg", Namespace: ns}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: leases.Name},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func scrape(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
