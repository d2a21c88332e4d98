package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/fakewatch"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	"fenceline.io/fenceline/pkg/names"
	bmc "fenceline.io/fenceline/test/bmc/redfish"
)

const (
	ns       = "fenceline-system"
	user     = "fence-admin"
	password = "Probe-S3cret-pw"
)

type fixture struct {
	ctx     context.Context
	logs    func() string
	bmc     *bmc.Server
	kube    *kubefake.Clientset
	fencing *fencingfake.Clientset
	events  *record.FakeRecorder
	metrics *Metrics
	ctrl    *Controller
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	t.Cleanup(cancel)
	f := &fixture{ctx: ctx, bmc: bmc.New(bmc.Options{Username: user, Password: password}), events: record.NewFakeRecorder(20)}
	t.Cleanup(f.bmc.Close)
	f.logs = func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	actionTimeout := func(c *fencingv1alpha1.FenceClass) {
		c.Spec.Timeouts.Action = &metav1.Duration{Duration: 2 * time.Second}
	}
	class := testobj.FenceClass("redfish", testobj.InsecureTLS(), testobj.Credentials(ns, "bmc"), actionTimeout)
	target := testobj.FenceTarget("node-1", testobj.Endpoints(fencingv1alpha1.FenceEndpoint{FenceClassName: "redfish", Address: f.bmc.Address()}))
	// The API server's first generation, which the probe's status observes.
	target.Generation = 1
	// NewClientset tracks managed fields with a schema the CRDs do not have.
	f.fencing = fencingfake.NewSimpleClientset(class, target)
	f.kube = kubefake.NewClientset(credentials(password))
	// A write right after the cache sync is seen only once the watches
	// run: wait for all three below.
	watches := fakewatch.Track(f.fencing, f.kube)
	fi := fencinginformers.NewSharedInformerFactory(f.fencing, 0)
	ki := informers.NewSharedInformerFactoryWithOptions(f.kube, 0, informers.WithNamespace(ns))
	var err error
	if f.metrics, err = NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	f.ctrl, err = New(Config{
		Client: f.fencing, Targets: fi.Fencing().V1alpha1().FenceTargets(), Classes: fi.Fencing().V1alpha1().FenceClasses(),
		Secrets: ki.Core().V1().Secrets(), CredentialsNamespace: ns, Recorder: f.events, Metrics: f.metrics, Interval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	fi.Start(ctx.Done())
	ki.Start(ctx.Done())
	fi.WaitForCacheSync(ctx.Done())
	ki.WaitForCacheSync(ctx.Done())
	// FenceTargets, FenceClasses and Secrets.
	if err := watches.Wait(ctx, 3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); fi.Shutdown(); ki.Shutdown(); f.ctrl.queue.ShutDown() })
	return f
}

func credentials(pw string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"},
		Data: map[string][]byte{devices.UsernameKey: []byte(user), devices.PasswordKey: []byte(pw)}}
}

// sync probes node-1 and waits until the lister sees what was written.
func (f *fixture) sync(t *testing.T) *fencingv1alpha1.FenceTarget {
	t.Helper()
	if err := f.ctrl.Sync(f.ctx, "node-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	stored, err := f.fencing.FencingV1alpha1().FenceTargets().Get(f.ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "the lister to see the status", func() bool {
		cached, err := f.ctrl.targets.Get("node-1")
		// The simple fake tracker does not bump resource versions.
		return err == nil && equality.Semantic.DeepEqual(cached.Status, stored.Status)
	})
	return stored
}

func (f *fixture) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (f *fixture) statusWrites() int {
	n := 0
	for _, a := range f.fencing.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// nextEvent is the next recorded Event, or "" when there is none.
func (f *fixture) nextEvent() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

func wantReachable(t *testing.T, ft *fencingv1alpha1.FenceTarget, status metav1.ConditionStatus, reason string, ps fencingv1alpha1.PowerState) {
	t.Helper()
	c := meta.FindStatusCondition(ft.Status.Conditions, fencingv1alpha1.FenceTargetReachable)
	if c == nil || c.Status != status || c.Reason != reason || ft.Status.PowerState != ps || ft.Status.LastProbeTime == nil {
		t.Fatalf("status %+v, want Reachable=%s (%s), powerState %s", ft.Status, status, reason, ps)
	}
}

func TestSync(t *testing.T) {
	f := newFixture(t)

	ft := f.sync(t)
	wantReachable(t, ft, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn)
	if e := f.nextEvent(); e != "" {
		t.Errorf("first reachable probe recorded %q, want no Event", e)
	}
	if got := testutil.ToFloat64(f.metrics.Reachable.WithLabelValues("node-1")); got != 1 {
		t.Errorf("reachable gauge %v, want 1", got)
	}

	writes := f.statusWrites()
	f.sync(t)
	if got := f.statusWrites(); got != writes {
		t.Errorf("an unchanged probe wrote the status (%d writes, want %d)", got, writes)
	}

	// A wrong password: CredentialsRejected, and the password nowhere.
	const wrong = "Wrong-Passw0rd-xyz"
	if _, err := f.kube.CoreV1().Secrets(ns).Update(f.ctx, credentials(wrong), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "the Secret update", func() bool {
		s, err := f.ctrl.secrets.Secrets(ns).Get("bmc")
		return err == nil && string(s.Data[devices.PasswordKey]) == wrong
	})
	ft = f.sync(t)
	wantReachable(t, ft, metav1.ConditionFalse, devices.ReasonCredentialsRejected, fencingv1alpha1.PowerStateUnknown)
	e := f.nextEvent()
	if !strings.HasPrefix(e, "Warning "+EventUnreachable) {
		t.Errorf("Event %q, want a Warning %s", e, EventUnreachable)
	}
	for what, text := range map[string]string{"status": ft.Status.Conditions[0].Message, "Event": e, "logs": f.logs()} {
		for _, secret := range []string{wrong, password} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s carries a password: %s", what, text)
			}
		}
	}

	// Right password, BMC down: Unreachable.
	if _, err := f.kube.CoreV1().Secrets(ns).Update(f.ctx, credentials(password), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "the Secret update", func() bool {
		s, err := f.ctrl.secrets.Secrets(ns).Get("bmc")
		return err == nil && string(s.Data[devices.PasswordKey]) == password
	})
	if err := f.bmc.SetUnreachable(true); err != nil {
		t.Fatal(err)
	}
	ft = f.sync(t)
	wantReachable(t, ft, metav1.ConditionFalse, devices.ReasonUnreachable, fencingv1alpha1.PowerStateUnknown)
	if e := f.nextEvent(); !strings.HasPrefix(e, "Warning "+EventUnreachable) {
		t.Errorf("Event %q, want a Warning %s", e, EventUnreachable)
	}
	if got := testutil.ToFloat64(f.metrics.Reachable.WithLabelValues("node-1")); got != 0 {
		t.Errorf("reachable gauge %v, want 0", got)
	}

	// Recovers: True, with a Normal Event.
	if err := f.bmc.SetUnreachable(false); err != nil {
		t.Fatal(err)
	}
	ft = f.sync(t)
	wantReachable(t, ft, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn)
	if e := f.nextEvent(); !strings.HasPrefix(e, "Normal "+EventReachable) {
		t.Errorf("Event %q, want a Normal %s", e, EventReachable)
	}
	if got := testutil.ToFloat64(f.metrics.Probes.WithLabelValues(devices.ReasonCredentialsRejected)); got != 1 {
		t.Errorf("probe_total{result=CredentialsRejected} %v, want 1", got)
	}

	// Read-only: the BMC saw no Reset.
	for _, r := range f.bmc.Requests() {
		if r.ResetType != "" {
			t.Errorf("the probe sent a reset: %+v", r)
		}
	}
}

func TestSyncMissingClassAndDeletedTarget(t *testing.T) {
	f := newFixture(t)
	if err := f.fencing.FencingV1alpha1().FenceClasses().Delete(f.ctx, "redfish", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "the class deletion", func() bool {
		_, err := f.ctrl.classes.Get("redfish")
		return err != nil
	})
	ft := f.sync(t)
	wantReachable(t, ft, metav1.ConditionFalse, devices.ReasonInvalidConfiguration, fencingv1alpha1.PowerStateUnknown)

	if err := f.fencing.FencingV1alpha1().FenceTargets().Delete(f.ctx, "node-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "the target deletion", func() bool {
		_, err := f.ctrl.targets.Get("node-1")
		return err != nil
	})
	if err := f.ctrl.Sync(f.ctx, "node-1"); err != nil {
		t.Fatalf("sync of a deleted target: %v", err)
	}
	if n := testutil.CollectAndCount(f.metrics.Reachable); n != 0 {
		t.Errorf("%d reachable series left for a deleted target", n)
	}
}

// TestPowerCheckProbedAtOnce: with the controller running and an hour
// between probes, a power check asked on a target is probed at once and
// answered with the state read after the ask; a second ask is answered
// anew.
func TestPowerCheckProbedAtOnce(t *testing.T) {
	f := newFixture(t)
	go f.ctrl.Run(f.ctx, 1)
	// At start the target may be probed twice: its own add, and the adds of
	// the class and Secret it refers to, as their informers deliver them.
	f.waitFor(t, "the first probe", func() bool { return f.statusWrites() >= 1 })
	ask := func(token string) {
		t.Helper()
		ft, err := f.fencing.FencingV1alpha1().FenceTargets().Get(f.ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ft.Annotations = map[string]string{names.PowerCheckAnnotation: token}
		if _, err := f.fencing.FencingV1alpha1().FenceTargets().Update(f.ctx, ft, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	answered := func(token string, want fencingv1alpha1.PowerState) {
		t.Helper()
		f.waitFor(t, "the answer to "+token, func() bool {
			ft, err := f.fencing.FencingV1alpha1().FenceTargets().Get(f.ctx, "node-1", metav1.GetOptions{})
			return err == nil && ft.Status.PowerCheck != nil && *ft.Status.PowerCheck == fencingv1alpha1.FencePowerCheck{Token: token, PowerState: want}
		})
	}
	f.bmc.SetPowerState("1", "Off")
	ask("t1")
	answered("t1", fencingv1alpha1.PowerStateOff)
	f.bmc.SetPowerState("1", "On")
	ask("t2")
	answered("t2", fencingv1alpha1.PowerStateOn)
	if got := testutil.ToFloat64(f.metrics.PowerChecks.WithLabelValues("Off")); got != 1 {
		t.Errorf("power checks answered Off: %v, want 1", got)
	}
}
