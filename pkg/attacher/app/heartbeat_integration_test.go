package app_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// Environment of the attacher process that TestHeartbeatOnRealAPIServer
// starts from its own test binary, so that it can kill it with SIGKILL.
const (
	helperKubeconfigEnv = "FENCELINE_TEST_ATTACHER_KUBECONFIG"
	helperCSIAddressEnv = "FENCELINE_TEST_ATTACHER_CSI_ADDRESS"
	helperIdentityEnv   = "FENCELINE_TEST_ATTACHER_IDENTITY"
)

var heartbeatLease = names.AttacherHeartbeatLeaseName(driver.DefaultName)

// TestHeartbeatOnRealAPIServer checks the heartbeat Lease against a real
// kube-apiserver under deploy/attacher's RBAC: only the leader renews it, a
// graceful stop deletes it, and a killed attacher leaves it to go stale.
func TestHeartbeatOnRealAPIServer(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	applyRBAC(t, c)
	saConfig, saKubeconfig := c.ServiceAccountConfig(t, namespace, account)
	admin := c.Client()

	t.Run("only the leader renews; the next leader takes over", func(t *testing.T) {
		w := newWorld(t, admin, "hb-leader", true)
		stopA := w.startAttacherWith(t, saConfig, func(o *app.Options) { withLeaderElection(o, "hb-a") })
		waitHeartbeat(t, w, "held by hb-a", heldBy("hb-a"))
		w.startAttacherWith(t, saConfig, func(o *app.Options) { withLeaderElection(o, "hb-b") })
		// Every write to the Lease while hb-b waits for the leader lease
		// must be hb-a's; three renewals (about 4 s) are the barrier.
		l := watchRenewals(t, w, 3, func(l *coordinationv1.Lease) {
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "hb-a" {
				t.Fatalf("heartbeat written by %q while hb-a leads", h)
			}
		})
		if l.Annotations[names.HeartbeatUnpublishFenceAnnotation] != "true" || l.Annotations[names.HeartbeatDriverAnnotation] != driver.DefaultName ||
			l.Labels[names.DriverLabel] != names.SanitizeDriverName(driver.DefaultName) || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 4 {
			t.Errorf("heartbeat Lease lacks its evidence: %+v", l)
		}
		if ev := cutoff.AttacherServes(driver.DefaultName, cutoff.Snapshot([]*coordinationv1.Lease{l}, time.Now()), &storagev1.CSIDriver{}, time.Now()); !ev.Serving {
			t.Errorf("fresh heartbeat not accepted: %s", ev.Missing)
		}
		stopA()
		waitHeartbeat(t, w, "held by hb-b", heldBy("hb-b"))
	})

	t.Run("a graceful stop deletes the Lease", func(t *testing.T) {
		w := newWorld(t, admin, "hb-stop", false)
		stop := w.startAttacherWith(t, saConfig, func(o *app.Options) { withLeaderElection(o, "hb-c") })
		l := waitHeartbeat(t, w, "held by hb-c", heldBy("hb-c"))
		ev := cutoff.AttacherServes(driver.DefaultName, cutoff.Snapshot([]*coordinationv1.Lease{l}, time.Now()), &storagev1.CSIDriver{}, time.Now())
		if ev.Serving || !strings.Contains(ev.Missing, "does not advertise UNPUBLISH_FENCE") {
			t.Errorf("heartbeat of a driver without UNPUBLISH_FENCE: %+v, want it refused for that", ev)
		}
		stop()
		waitHeartbeat(t, w, "deleted", func(_ *coordinationv1.Lease, err error) bool { return apierrors.IsNotFound(err) })
	})

	t.Run("a killed attacher's Lease stays and goes stale", func(t *testing.T) {
		w := newWorld(t, admin, "hb-kill", true)
		cmd, logs := startHelper(t, saKubeconfig, strings.TrimPrefix(w.drv.Endpoint(), "unix://"), "hb-killed")
		l := waitHeartbeat(t, w, "held by the attacher process", heldBy("hb-killed"))
		if ev := cutoff.AttacherServes(driver.DefaultName, cutoff.Snapshot([]*coordinationv1.Lease{l}, time.Now()), &storagev1.CSIDriver{}, time.Now()); !ev.Serving {
			t.Fatalf("heartbeat of the running attacher refused: %s; attacher log:\n%s", ev.Missing, logs.String())
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill attacher: %v", err)
		}
		_ = cmd.Wait()
		killed := time.Now()
		last := waitHeartbeat(t, w, "stale", func(l *coordinationv1.Lease, err error) bool {
			return err == nil && strings.Contains(cutoff.AttacherServes(driver.DefaultName, cutoff.Snapshot([]*coordinationv1.Lease{l}, time.Now()), &storagev1.CSIDriver{}, time.Now()).Missing, "stale since")
		})
		if h := ptr.Deref(last.Spec.HolderIdentity, ""); h != "hb-killed" || last.Spec.RenewTime.After(killed) {
			t.Errorf("stale Lease held by %q, renewed %v (killed %v); want the killed attacher's last renewal", h, last.Spec.RenewTime, killed)
		}
	})
}

func heldBy(identity string) func(*coordinationv1.Lease, error) bool {
	return func(l *coordinationv1.Lease, err error) bool {
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == identity
	}
}

// watchRenewals watches the heartbeat Lease, calls check on every version
// of it, and returns the version after n more renewals.
func watchRenewals(t *testing.T, w *world, n int, check func(*coordinationv1.Lease)) *coordinationv1.Lease {
	t.Helper()
	l, err := w.client.CoordinationV1().Leases(namespace).Get(w.ctx, heartbeatLease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get heartbeat Lease: %v", err)
	}
	check(l)
	ctx, cancel := context.WithTimeout(w.ctx, timeout)
	defer cancel()
	wi, err := w.client.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + heartbeatLease, ResourceVersion: l.ResourceVersion,
	})
	if err != nil {
		t.Fatalf("watch heartbeat Lease: %v", err)
	}
	defer wi.Stop()
	for renewals := 0; renewals < n; {
		select {
		case ev, ok := <-wi.ResultChan():
			if !ok || ev.Type != watch.Modified {
				t.Fatalf("heartbeat watch ended or saw %v after %d renewals", ev.Type, renewals)
			}
			next := ev.Object.(*coordinationv1.Lease)
			check(next)
			if next.Spec.RenewTime.After(l.Spec.RenewTime.Time) {
				renewals++
			}
			l = next
		case <-ctx.Done():
			t.Fatalf("only %d of %d heartbeat renewals within %v", renewals, n, timeout)
		}
	}
	return l
}

// waitHeartbeat waits until the heartbeat Lease (or its absence) satisfies
// ok and returns the last version read.
func waitHeartbeat(t *testing.T, w *world, what string, ok func(*coordinationv1.Lease, error) bool) *coordinationv1.Lease {
	t.Helper()
	var last *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := w.client.CoordinationV1().Leases(namespace).Get(ctx, heartbeatLease, metav1.GetOptions{})
		if err == nil {
			last = l
		}
		return ok(l, err), nil
	})
	if err != nil {
		t.Fatalf("heartbeat Lease never %s: %v (last %+v)", what, err, last)
	}
	return last
}

// startHelper runs this test binary as a separate attacher process (see
// TestHeartbeatHelperProcess) and kills it when the test ends.
func startHelper(t *testing.T, kubeconfig, csiAddress, identity string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHeartbeatHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperKubeconfigEnv+"="+kubeconfig, helperCSIAddressEnv+"="+csiAddress, helperIdentityEnv+"="+identity)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start attacher process: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, logs
}

// TestHeartbeatHelperProcess is not a test: it is the attacher process that
// TestHeartbeatOnRealAPIServer starts and kills. It runs until killed.
func TestHeartbeatHelperProcess(t *testing.T) {
	kubeconfig := os.Getenv(helperKubeconfigEnv)
	if kubeconfig == "" {
		t.Skip("only run as a child of TestHeartbeatOnRealAPIServer")
	}
	_, ctx := ktesting.NewTestContext(t)
	opts := app.DefaultOptions()
	opts.Kubeconfig = kubeconfig
	opts.CSIAddress = os.Getenv(helperCSIAddressEnv)
	opts.KubeAPIQPS, opts.KubeAPIBurst = 50, 100
	withLeaderElection(&opts, os.Getenv(helperIdentityEnv))
	if err := app.Run(ctx, opts); err != nil {
		t.Fatalf("attacher: %v", err)
	}
}
