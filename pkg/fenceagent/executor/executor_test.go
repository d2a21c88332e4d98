package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/fakewatch"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

const (
	ns       = "fenceline-system"
	password = "Exec-S3cret-pw"
	reqName  = "node-1-fence"
)

// fakeDevice is a power.Device in memory. With stayOn it accepts Off and
// stays On (a BMC that lies); failOffs makes that many Off calls fail
// first. onOff, when set, runs at each Off.
type fakeDevice struct {
	mu       sync.Mutex
	state    power.State
	stayOn   bool
	failOffs int
	offErr   error
	offs     int
	ons      int
	onOff    func()
}

func (d *fakeDevice) Status(context.Context) (power.State, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state, nil
}

func (d *fakeDevice) Off(context.Context) error {
	d.mu.Lock()
	hook := d.onOff
	d.offs++
	if d.failOffs > 0 {
		d.failOffs--
		d.mu.Unlock()
		return d.offErr
	}
	if !d.stayOn {
		d.state = power.StateOff
	}
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

func (d *fakeDevice) On(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ons++
	d.state = power.StateOn
	return nil
}

func (d *fakeDevice) counts() (offs, ons int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.offs, d.ons
}

type fixture struct {
	ctx     context.Context
	logs    func() string
	fencing *fencingfake.Clientset
	events  *record.FakeRecorder
	metrics *Metrics
	ctrl    *Controller
	devices map[string]*fakeDevice
}

// classNames are the FenceClasses of the fixture: one level each, in this
// order, unless a test's policy says otherwise.
var classNames = []string{"bmc", "pdu-a", "pdu-b"}

func newFixture(t *testing.T, policy *fencingv1alpha1.FencePolicy, req *fencingv1alpha1.FencingRequest, node *corev1.Node) *fixture {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	f := &fixture{ctx: ctx, events: record.NewFakeRecorder(100), devices: map[string]*fakeDevice{}}
	f.logs = func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	objs := []runtime.Object{policy, req}
	var endpoints []fencingv1alpha1.FenceEndpoint
	for _, name := range classNames {
		objs = append(objs, testobj.FenceClass(name, testobj.Credentials(ns, "bmc"), quick))
		endpoints = append(endpoints, fencingv1alpha1.FenceEndpoint{FenceClassName: name, Address: "https://" + name})
		f.devices[name] = &fakeDevice{state: power.StateOn}
	}
	objs = append(objs, testobj.FenceTarget("node-1", testobj.Endpoints(endpoints...)))
	f.fencing = fencingfake.NewSimpleClientset(objs...)
	kubeObjs := []runtime.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"},
		Data: map[string][]byte{devices.UsernameKey: []byte("admin"), devices.PasswordKey: []byte(password)}}}
	if node != nil {
		kubeObjs = append(kubeObjs, node)
	}
	kube := kubefake.NewClientset(kubeObjs...)
	watches := fakewatch.Track(f.fencing, kube)
	fi := fencinginformers.NewSharedInformerFactory(f.fencing, 0)
	ki := informers.NewSharedInformerFactory(kube, 0)
	si := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	var err error
	if f.metrics, err = NewMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	build := func(class *fencingv1alpha1.FenceClass, ep fencingv1alpha1.FenceEndpoint, secret *corev1.Secret) (power.Device, error) {
		if class == nil || secret == nil {
			return devices.Build(class, ep, secret) // its errors
		}
		return f.devices[class.Name], nil
	}
	f.ctrl, err = New(Config{
		Client: f.fencing, Requests: fi.Fencing().V1alpha1().FencingRequests(), Policies: fi.Fencing().V1alpha1().FencePolicies(),
		Targets: fi.Fencing().V1alpha1().FenceTargets(), Classes: fi.Fencing().V1alpha1().FenceClasses(), Nodes: ki.Core().V1().Nodes(),
		Secrets: si.Core().V1().Secrets(), CredentialsNamespace: ns, Recorder: f.events, Metrics: f.metrics, Build: build,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, start := range []func(<-chan struct{}){fi.Start, ki.Start, si.Start} {
		start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), f.ctrl.synced...) {
		t.Fatal("caches never synced")
	}
	if err := watches.Wait(ctx, len(f.ctrl.synced)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); fi.Shutdown(); ki.Shutdown(); si.Shutdown(); f.ctrl.queue.ShutDown() })
	return f
}

// quick gives a class timeouts short enough for a test, and one retry.
func quick(c *fencingv1alpha1.FenceClass) {
	d := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	retries := int32(1)
	c.Spec.Timeouts = fencingv1alpha1.FenceTimeouts{Action: d(200 * time.Millisecond), Verify: d(100 * time.Millisecond), PollInterval: d(10 * time.Millisecond)}
	c.Spec.Retries = &retries
}

// levels is the policy "default" with one level per class name, in the
// order given, each with a 5 s timeout.
func levels(classes ...string) *fencingv1alpha1.FencePolicy {
	var ls []fencingv1alpha1.FenceLevel
	for i, c := range classes {
		l := testobj.FenceLevel(int32(i+1), c)
		l.Timeout = &metav1.Duration{Duration: 5 * time.Second}
		ls = append(ls, l)
	}
	return testobj.FencePolicy("default", testobj.Levels(ls...))
}

func node1() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-1"}}
}

// sync runs one sync and returns the request as stored.
func (f *fixture) sync(t *testing.T) *fencingv1alpha1.FencingRequest {
	t.Helper()
	if err := f.ctrl.Sync(f.ctx, reqName); err != nil {
		t.Fatalf("sync: %v", err)
	}
	r, err := f.fencing.FencingV1alpha1().FencingRequests().Get(f.ctx, reqName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Status.Attempts {
		if a.Result == fencingv1alpha1.FenceAttemptSucceeded && a.VerifiedPowerState != string(power.StateOff) {
			t.Errorf("a Succeeded attempt without a read-back Off: %+v", a)
		}
	}
	return r
}

// statusWrites counts the status updates sent.
func (f *fixture) statusWrites() int {
	return len(slices.DeleteFunc(f.fencing.Actions(), func(a k8stesting.Action) bool {
		return !a.Matches("update", "fencingrequests") || a.GetSubresource() != "status"
	}))
}

// drainEvents returns the reasons of the Events recorded so far.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

type attemptSummary struct {
	level  int32
	class  string
	result fencingv1alpha1.FenceAttemptResult
	state  string
}

func summarize(as []fencingv1alpha1.FenceAttempt) []attemptSummary {
	out := make([]attemptSummary, 0, len(as))
	for _, a := range as {
		out = append(out, attemptSummary{a.Level, a.FenceClass, a.Result, a.VerifiedPowerState})
	}
	return out
}

func wantAttempts(t *testing.T, r *fencingv1alpha1.FencingRequest, want ...attemptSummary) {
	t.Helper()
	got := summarize(r.Status.Attempts)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("attempts %+v, want %+v (status %+v)", got, want, r.Status.Attempts)
	}
	for _, a := range r.Status.Attempts {
		if a.EndTime == nil || a.StartTime.IsZero() {
			t.Errorf("attempt without start or end: %+v", a)
		}
	}
}

func TestLyingDeviceThenNextLevel(t *testing.T) {
	f := newFixture(t, levels("bmc", "pdu-a", "pdu-b"), fencingRequest(), node1())
	f.devices["bmc"].stayOn = true
	// Each Off happens after its attempt is recorded as running.
	for _, name := range classNames {
		f.devices[name].onOff = func() {
			r, err := f.fencing.FencingV1alpha1().FencingRequests().Get(f.ctx, reqName, metav1.GetOptions{})
			if err != nil || unfinished(r.Status.Attempts) != 1 {
				t.Errorf("Off sent with no running attempt recorded: %v %+v", err, r.Status.Attempts)
			}
		}
	}
	r := f.sync(t)
	if r.Status.Attempts[0].Result == fencingv1alpha1.FenceAttemptSucceeded {
		t.Fatalf("a device that stays On succeeded: %+v", r.Status.Attempts[0])
	}
	first := r.Status.Attempts[0].Result
	wantAttempts(t, r, attemptSummary{1, "bmc", first, "On"}, attemptSummary{2, "pdu-a", fencingv1alpha1.FenceAttemptSucceeded, "Off"})
	if r.Status.FailedRounds != 0 {
		t.Errorf("failedRounds %d after a proven level, want 0", r.Status.FailedRounds)
	}
	if offs, _ := f.devices["pdu-b"].counts(); offs != 0 {
		t.Errorf("level 3 was tried after level 2 was proven (%d Off)", offs)
	}
	if level, ok := LevelProven(r, levels("bmc", "pdu-a", "pdu-b")); !ok || level != 2 {
		t.Errorf("LevelProven = %d, %v; want 2", level, ok)
	}
	events := strings.Join(f.drainEvents(), "\n")
	for _, want := range []string{"Normal " + EventAttemptStarted, "Warning " + EventAttemptFailed, "Normal " + EventVerified} {
		if !strings.Contains(events, want) {
			t.Errorf("no %q Event in:\n%s", want, events)
		}
	}
	if got := testutil.ToFloat64(f.metrics.Attempts.WithLabelValues("Redfish", "Succeeded")); got != 1 {
		t.Errorf("attempts_total{Succeeded} = %v, want 1", got)
	}
	// Proven: another sync does nothing.
	if r = f.sync(t); len(r.Status.Attempts) != 2 {
		t.Errorf("a proven request was fenced again: %+v", summarize(r.Status.Attempts))
	}
}

func TestAllLevelsFail(t *testing.T) {
	f := newFixture(t, levels("bmc", "pdu-a"), fencingRequest(), nil)
	f.devices["bmc"].stayOn, f.devices["pdu-a"].stayOn = true, true
	r := f.sync(t)
	if len(r.Status.Attempts) != 2 || r.Status.FailedRounds != 1 {
		t.Fatalf("attempts %+v, failedRounds %d; want two failed attempts and failedRounds 1", summarize(r.Status.Attempts), r.Status.FailedRounds)
	}
	// A start and an end per attempt; the count rides on the last end.
	if n := f.statusWrites(); n != 4 {
		t.Errorf("%d status writes for two attempts, want 4", n)
	}
	if events := strings.Join(f.drainEvents(), "\n"); !strings.Contains(events, "Warning "+EventRoundFailed) {
		t.Errorf("no %s Event in:\n%s", EventRoundFailed, events)
	}
	// Within the backoff, no new round.
	if r = f.sync(t); len(r.Status.Attempts) != 2 || r.Status.FailedRounds != 1 {
		t.Errorf("a round ran within the backoff: %+v, failedRounds %d", summarize(r.Status.Attempts), r.Status.FailedRounds)
	}
	// After it, the next round; it may succeed.
	f.devices["pdu-a"].stayOn = false
	f.ctrl.cfg.Now = func() time.Time { return time.Now().Add(BaseBackoff) }
	r = f.sync(t)
	if _, ok := LevelProven(r, levels("bmc", "pdu-a")); !ok || r.Status.FailedRounds != 1 {
		t.Errorf("after the backoff: %+v, failedRounds %d; want level 2 proven", summarize(r.Status.Attempts), r.Status.FailedRounds)
	}
}

func TestRetryWithinAttempt(t *testing.T) {
	f := newFixture(t, levels("bmc"), fencingRequest(), node1())
	f.devices["bmc"].failOffs, f.devices["bmc"].offErr = 1, errors.New("503 from the BMC")
	r := f.sync(t)
	wantAttempts(t, r, attemptSummary{1, "bmc", fencingv1alpha1.FenceAttemptSucceeded, "Off"})
	if offs, _ := f.devices["bmc"].counts(); offs != 2 {
		t.Errorf("%d Off requests, want 2 (one failed, one retried)", offs)
	}
}

func TestReboot(t *testing.T) {
	f := newFixture(t, levels("bmc"), fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.Action = fencingv1alpha1.FenceActionReboot }), node1())
	r := f.sync(t)
	wantAttempts(t, r, attemptSummary{1, "bmc", fencingv1alpha1.FenceAttemptSucceeded, "Off"})
	if offs, ons := f.devices["bmc"].counts(); offs != 1 || ons != 1 {
		t.Errorf("%d Off, %d On; want 1 and 1", offs, ons)
	}
}

func TestMisconfiguredClassFailsItsAttempt(t *testing.T) {
	f := newFixture(t, levels("ghost", "bmc"), fencingRequest(), node1())
	r := f.sync(t)
	wantAttempts(t, r, attemptSummary{1, "ghost", fencingv1alpha1.FenceAttemptFailed, ""}, attemptSummary{2, "bmc", fencingv1alpha1.FenceAttemptSucceeded, "Off"})
	if msg := r.Status.Attempts[0].Message; !strings.Contains(msg, "no endpoint for FenceClass ghost") {
		t.Errorf("message %q does not name the missing endpoint", msg)
	}
}

func TestPasswordNeverWritten(t *testing.T) {
	f := newFixture(t, levels("bmc"), fencingRequest(), node1())
	f.devices["bmc"].failOffs, f.devices["bmc"].offErr = 10, fmt.Errorf("login as admin:%s refused", password)
	f.devices["bmc"].stayOn = true
	r := f.sync(t)
	if r.Status.Attempts[0].Result == fencingv1alpha1.FenceAttemptSucceeded || !strings.Contains(r.Status.Attempts[0].Message, "***") {
		t.Fatalf("attempt %+v, want a failure with the password masked", r.Status.Attempts[0])
	}
	for what, text := range map[string]string{"status": r.Status.Attempts[0].Message, "Events": strings.Join(f.drainEvents(), "\n"), "logs": f.logs()} {
		if strings.Contains(text, password) {
			t.Errorf("the %s carry the password: %s", what, text)
		}
	}
}

func TestInterruptedAttempt(t *testing.T) {
	running := fencingv1alpha1.FenceAttempt{Level: 1, FenceClass: "bmc", Method: "Redfish", StartTime: metav1.NewTime(time.Now().Add(-time.Minute))}
	f := newFixture(t, levels("bmc"), fencingRequest(testobj.Attempts(running)), node1())
	r := f.sync(t)
	if a := r.Status.Attempts[0]; a.Result != fencingv1alpha1.FenceAttemptFailed || a.Message != InterruptedMessage || a.EndTime == nil || r.Status.FailedRounds != 1 {
		t.Fatalf("attempt %+v, failedRounds %d; want it Failed (%q) and one failed round", a, r.Status.FailedRounds, InterruptedMessage)
	}
	if offs, _ := f.devices["bmc"].counts(); offs != 0 {
		t.Errorf("marking an interrupted attempt sent %d Off", offs)
	}
}

func TestRefusals(t *testing.T) {
	recreated := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-2"}}
	for name, tc := range map[string]struct {
		policy *fencingv1alpha1.FencePolicy
		node   *corev1.Node
		reason string
	}{
		"recreated node": {levels("bmc"), recreated, ReasonNodeRecreated},
		"missing policy": {func() *fencingv1alpha1.FencePolicy { p := levels("bmc"); p.Name = "other"; return p }(), node1(), ReasonPolicyNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.policy, fencingRequest(), tc.node)
			if r := f.sync(t); len(r.Status.Attempts) != 0 {
				t.Errorf("attempts %+v, want none", summarize(r.Status.Attempts))
			}
			if events := strings.Join(f.drainEvents(), "\n"); !strings.Contains(events, "Warning "+EventRefused+" ") || !strings.Contains(events, tc.reason) {
				t.Errorf("no %s Event with %s in:\n%s", EventRefused, tc.reason, events)
			}
		})
	}
}

func TestPolicyBySelector(t *testing.T) {
	p := levels("bmc")
	p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "1"}}
	n := node1()
	n.Labels = map[string]string{"rack": "1"}
	f := newFixture(t, p, fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.PolicyName = "" }), n)
	wantAttempts(t, f.sync(t), attemptSummary{1, "bmc", fencingv1alpha1.FenceAttemptSucceeded, "Off"})
}

func TestLevelTimeout(t *testing.T) {
	p := levels("bmc")
	p.Spec.Levels[0].Timeout = &metav1.Duration{Duration: 50 * time.Millisecond}
	f := newFixture(t, p, fencingRequest(), node1())
	f.devices["bmc"].stayOn = true
	r := f.sync(t)
	wantAttempts(t, r, attemptSummary{1, "bmc", fencingv1alpha1.FenceAttemptTimedOut, "On"})
	if r.Status.FailedRounds != 1 {
		t.Errorf("failedRounds %d, want 1", r.Status.FailedRounds)
	}
}
