package leader_test

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/component/leader"
	"fenceline.io/fenceline/test/cluster"
)

const namespace = "default"

func elector(t *testing.T, client kubernetes.Interface, lease string) *leader.Elector {
	t.Helper()
	e, err := leader.New(leader.Config{
		Options: leader.Options{Enabled: true, Namespace: namespace,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond},
		Name: lease, Identity: "me", Core: client.CoreV1(), Coordination: client.CoordinationV1(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func holder(ctx context.Context, client kubernetes.Interface, lease string) string {
	l, err := client.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// runAsync runs work under e and returns Run's result on a channel.
func runAsync(ctx context.Context, e *leader.Elector, work func(context.Context) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, work) }()
	return done
}

func wantResult(t *testing.T, done <-chan error, want error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Errorf("Run returned %v, want %v", err, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s")
	}
}

// TestRunIntegration checks the one behaviour both binaries share, against
// a real kube-apiserver: the Lease is given up whenever the work stops,
// and Run says why it stopped.
func TestRunIntegration(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	client := c.Client()
	_, ctx := ktesting.NewTestContext(t)
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	t.Run("failed work gives the lease up and returns its error", func(t *testing.T) {
		failure := errors.New("boom")
		done := runAsync(ctx, elector(t, client, "fails"), func(context.Context) error { return failure })
		wantResult(t, done, failure)
		if h := holder(ctx, client, "fails"); h != "" {
			t.Errorf("lease still held by %q after the work failed", h)
		}
	})

	t.Run("a signal stops the work, releases the lease, returns nil", func(t *testing.T) {
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := make(chan struct{})
		done := runAsync(runCtx, elector(t, client, "signal"), func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return nil
		})
		poll("the lease to be held", func() bool { return holder(ctx, client, "signal") == "me" })
		cancel()
		wantResult(t, done, nil)
		select {
		case <-stopped:
		default:
			t.Error("Run returned before the work stopped")
		}
		if h := holder(ctx, client, "signal"); h != "" {
			t.Errorf("lease still held by %q after a clean stop", h)
		}
	})

	t.Run("a signal keeps the lease until the stopping work returned", func(t *testing.T) {
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen, finish := make(chan struct{}), make(chan struct{})
		done := runAsync(runCtx, elector(t, client, "slow-stop"), func(ctx context.Context) error {
			<-ctx.Done()
			close(seen)
			<-finish // a power-off attempt still under way
			return nil
		})
		poll("the lease to be held", func() bool { return holder(ctx, client, "slow-stop") == "me" })
		cancel()
		<-seen
		// The elector would release within a retry period (200 ms) of
		// its context ending; watch for several of them.
		var released string
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := client.CoordinationV1().Leases(namespace).Get(ctx, "slow-stop", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			released = ptr.Deref(l.Spec.HolderIdentity, "")
			return released != "me", nil
		})
		if err == nil {
			t.Fatalf("lease released (holder %q) while the work was still stopping", released)
		}
		close(finish)
		wantResult(t, done, nil)
		if h := holder(ctx, client, "slow-stop"); h != "" {
			t.Errorf("lease still held by %q after the work returned", h)
		}
	})

	t.Run("a lost lease stops the work and returns ErrLost", func(t *testing.T) {
		done := runAsync(ctx, elector(t, client, "lost"), func(ctx context.Context) error { <-ctx.Done(); return nil })
		poll("the lease to be held", func() bool { return holder(ctx, client, "lost") == "me" })
		// Another replica takes the lease over and keeps renewing it.
		stealCtx, stopStealing := context.WithCancel(ctx)
		defer stopStealing()
		go func() {
			_ = wait.PollUntilContextCancel(stealCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				l, err := client.CoordinationV1().Leases(namespace).Get(ctx, "lost", metav1.GetOptions{})
				if err == nil {
					l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("thief"), LeaseDurationSeconds: ptr.To[int32](60),
						AcquireTime: ptr.To(metav1.NowMicro()), RenewTime: ptr.To(metav1.NowMicro())}
					_, _ = client.CoordinationV1().Leases(namespace).Update(ctx, l, metav1.UpdateOptions{})
				}
				return false, nil
			})
		}()
		wantResult(t, done, leader.ErrLost)
	})

	t.Run("without election the work just runs", func(t *testing.T) {
		var e *leader.Elector
		failure := errors.New("boom")
		wantResult(t, runAsync(ctx, e, func(context.Context) error { return failure }), failure)
	})
}
