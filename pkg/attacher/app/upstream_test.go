package app_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
)

// TestSwitchWithUpstreamAttacher runs the upstream external-attacher binary
// (built by `make upstream-attacher`) and fenceline-attacher against the same
// API server, identity and driver: each side detaches what the other
// attached, and the shared lease never lets both lead.
func TestSwitchWithUpstreamAttacher(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	upstream, err := cluster.Tool("csi-attacher")
	if err != nil {
		t.Skipf("upstream external-attacher not built (run `make upstream-attacher`): %v", err)
	}
	applyRBAC(t, c)
	saConfig, saKubeconfig := c.ServiceAccountConfig(t, namespace, account)
	admin := c.Client()

	t.Run("a VA attached by fenceline-attacher is detached by upstream", func(t *testing.T) {
		w := newWorld(t, admin, "back", true)
		stop := w.startAttacherWith(t, saConfig, func(*app.Options) {})
		w.attach(t)
		stop()
		startUpstream(t, upstream, "--csi-address="+strings.TrimPrefix(w.drv.Endpoint(), "unix://"), "--kubeconfig="+saKubeconfig)
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, false, "OK")
	})

	t.Run("one leader across upstream and fenceline-attacher", func(t *testing.T) {
		w := newWorld(t, admin, "lease", true)
		lease := names.AttacherLeaseName(driver.DefaultName)
		leArgs := []string{"--leader-election", "--leader-election-namespace=" + namespace,
			"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s"}
		stopUpstream := startUpstream(t, upstream, append([]string{
			"--csi-address=" + strings.TrimPrefix(w.drv.Endpoint(), "unix://"), "--kubeconfig=" + saKubeconfig}, leArgs...)...)
		holder := waitLeaseHeld(t, w, lease, func(h string) bool { return h != "" && h != "fenceline-b" })
		w.startAttacherWith(t, saConfig, func(o *app.Options) {
			withLeaderElection(o, "fenceline-b")
			o.AttachEvents = true
		})
		// Upstream leads and attaches; fenceline-attacher, waiting for the
		// lease, must not act: it would emit an Attached Event (on here).
		w.attach(t)
		if got := leaseHolder(t, w, lease); got != holder {
			t.Fatalf("lease holder changed from %q to %q while upstream was running", holder, got)
		}
		if n := w.countEvents(t, "Attached"); n != 0 {
			t.Fatalf("fenceline-attacher acted without the lease: %d Attached Events", n)
		}
		stopUpstream()
		waitLeaseHeld(t, w, lease, func(h string) bool { return h == "fenceline-b" })
		// Both record client-go's LeaderElection Event on the Lease, from
		// the same source: the lock name before it was sanitized, and the
		// identity.
		waitLeaderElectionEvent(t, w, lease, "external-attacher-leader-"+driver.DefaultName, holder)
		waitLeaderElectionEvent(t, w, lease, "external-attacher-leader-"+driver.DefaultName, "fenceline-b")
		w.deleteVA(t)
		w.waitVAGone(t, timeout)
		w.wantUnpublish(t, false, "OK")
		w.waitEvent(t, v1.EventTypeNormal, "Detached")
	})
}

// startUpstream runs the upstream csi-attacher; the returned stop (also run
// at cleanup) terminates it and waits.
func startUpstream(t *testing.T, bin string, args ...string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--v=2", "--timeout=15s"}, args...)...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start upstream attacher: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("upstream attacher log:\n%s", logs.String())
		}
	}
	t.Cleanup(stop)
	return stop
}

func leaseHolder(t *testing.T, w *world, lease string) string {
	t.Helper()
	l, err := w.client.CoordinationV1().Leases(namespace).Get(w.ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitLeaseHeld waits until the lease holder satisfies ok and returns it.
func waitLeaseHeld(t *testing.T, w *world, lease string, ok func(string) bool) string {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := w.client.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		return ok(holder), nil
	})
	if err != nil {
		t.Fatalf("lease %s: holder %q never became the expected one: %v", lease, holder, err)
	}
	return holder
}

// waitLeaderElectionEvent waits for the Normal LeaderElection Event that
// the replica identity records on the Lease when it becomes leader, with
// "<lock>/<identity>" as its source, as the kubernetes-csi sidecars do.
func waitLeaderElectionEvent(t *testing.T, w *world, lease, lock, identity string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		events, err := w.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Lease,involvedObject.name=" + lease + ",reason=LeaderElection",
		})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Type == v1.EventTypeNormal && e.Source.Component == lock+"/"+identity && strings.Contains(e.Message, identity+" became leader") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		all, _ := w.client.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease"})
		var seen []string
		if all != nil {
			for _, e := range all.Items {
				seen = append(seen, fmt.Sprintf("%s %s %s (source %s)", e.InvolvedObject.Name, e.Reason, e.Message, e.Source.Component))
			}
		}
		t.Fatalf("no LeaderElection Event of %s on Lease %s: %v; Lease Events: %q", identity, lease, err, seen)
	}
}
