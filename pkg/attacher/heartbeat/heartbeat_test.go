package heartbeat

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/names"
)

const (
	testNS     = "kube-system"
	testDriver = "disk.example.com"
	interval   = 5 * time.Second
)

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	cfg    Config
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(start)
	return &env{t: t, ctx: ctx, client: client, clock: clk, cfg: Config{
		Client: client.CoordinationV1(), Namespace: testNS, Driver: testDriver, UnpublishFence: true,
		Version: "v1.2.3", Identity: "attacher-0", Interval: interval, Duration: 15 * time.Second, Clock: clk,
	}}
}

func (e *env) start() (stop func()) {
	stop = Start(e.ctx, e.cfg)
	e.t.Cleanup(stop)
	return stop
}

// waitLease waits until the Lease satisfies cond and returns it.
func (e *env) waitLease(what string, cond func(*coordinationv1.Lease, error) bool) *coordinationv1.Lease {
	e.t.Helper()
	var last *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(e.ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := e.client.CoordinationV1().Leases(testNS).Get(ctx, e.cfg.Name(), metav1.GetOptions{})
		last = l
		return cond(l, err), nil
	})
	if err != nil {
		e.t.Fatalf("Lease never %s: %v (last %+v)", what, err, last)
	}
	return last
}

// step advances the fake clock by d once the loop waits on it.
func (e *env) step(d time.Duration) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return e.clock.HasWaiters(), nil
	})
	if err != nil {
		e.t.Fatalf("heartbeat loop never waited: %v", err)
	}
	e.clock.Step(d)
}

func renewedAt(at time.Time) func(*coordinationv1.Lease, error) bool {
	return func(l *coordinationv1.Lease, err error) bool {
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Equal(at)
	}
}

func TestRunCreatesAndRenews(t *testing.T) {
	e := newEnv(t)
	e.start()
	l := e.waitLease("created", renewedAt(start))
	if got := l.Labels[names.DriverLabel]; got != "disk-example-com" {
		t.Errorf("label %s = %q", names.DriverLabel, got)
	}
	for k, want := range map[string]string{
		names.HeartbeatDriverAnnotation: testDriver, names.HeartbeatUnpublishFenceAnnotation: "true", names.HeartbeatVersionAnnotation: "v1.2.3",
	} {
		if got := l.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != "attacher-0" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 15 {
		t.Errorf("holder %v, duration %v; want attacher-0, 15", l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds)
	}
	e.step(interval)
	e.waitLease("renewed", renewedAt(start.Add(interval)))
}

func TestRunTakesOverFromAnotherHolder(t *testing.T) {
	old := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: names.AttacherHeartbeatLeaseName(testDriver),
			Labels: map[string]string{"keep": "me"}, Annotations: map[string]string{names.HeartbeatDriverAnnotation: testDriver}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("attacher-old"), LeaseTransitions: ptr.To[int32](2)},
	}
	e := newEnv(t, old)
	e.start()
	l := e.waitLease("taken over", renewedAt(start))
	if ptr.Deref(l.Spec.HolderIdentity, "") != "attacher-0" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 3 || l.Labels["keep"] != "me" {
		t.Errorf("holder %v, transitions %v, labels %v; want attacher-0, 3, others' labels kept", l.Spec.HolderIdentity, l.Spec.LeaseTransitions, l.Labels)
	}
}

func TestRunNeverOverwritesAnotherDriversLease(t *testing.T) {
	other := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: names.AttacherHeartbeatLeaseName(testDriver),
			Annotations: map[string]string{names.HeartbeatDriverAnnotation: "disk-example.com"}},
	}
	e := newEnv(t, other)
	var gets atomic.Int32
	e.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	e.start()
	e.step(interval) // the first attempt failed: a short retry
	e.step(interval)
	if n := gets.Load(); n < 2 {
		t.Fatalf("%d reads of the Lease, want the failed renewal retried", n)
	}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "update" || a.GetVerb() == "create" {
			t.Errorf("wrote another driver's Lease: %v", a)
		}
	}
}

func TestRunBacksOffAndRecovers(t *testing.T) {
	e := newEnv(t)
	var failures atomic.Int32
	failures.Store(3)
	e.client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
		}
		return false, nil, nil
	})
	e.start()
	// Retries after 200 ms, 400 ms and 800 ms (each with up to 10%
	// jitter): three 1 s steps reach the fourth attempt only if the loop
	// backs off below the 5 s interval after an error.
	for range 3 {
		e.step(time.Second)
	}
	e.waitLease("created after the errors", func(l *coordinationv1.Lease, err error) bool {
		return err == nil && l.Spec.RenewTime.Time.Before(start.Add(interval))
	})
}

func TestStopDeletesTheLease(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	e.waitLease("created", renewedAt(start))
	stop()
	e.waitLease("deleted", func(_ *coordinationv1.Lease, err error) bool { return apierrors.IsNotFound(err) })
}

func TestValidate(t *testing.T) {
	base := newEnv(t).cfg
	for name, mutate := range map[string]func(*Config){
		"no namespace":           func(c *Config) { c.Namespace = "" },
		"no driver":              func(c *Config) { c.Driver = "" },
		"interval zero":          func(c *Config) { c.Interval = 0 },
		"duration below renewal": func(c *Config) { c.Duration = c.Interval },
	} {
		c := base
		mutate(&c)
		if err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "heartbeat") {
			t.Errorf("%s: Run = %v, want a configuration error", name, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}
