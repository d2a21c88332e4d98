package attacherevidence

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/fakewatch"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

const testDriver = "disk.example.com"

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func heartbeat(namespace, driver, fence string, renewed time.Time) *coordinationv1.Lease {
	l := testobj.Heartbeat(namespace, driver, renewed, testobj.LeaseDuration(15*time.Second))
	l.Annotations[names.HeartbeatUnpublishFenceAnnotation] = fence
	return l
}

// recorder collects handler calls and the verdict each one announced.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	verdicts []bool
}

func (r *recorder) record(driver string, serving bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, driver)
	r.verdicts = append(r.verdicts, serving)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// last is the verdict the latest handler call announced.
func (r *recorder) last() (serving, called bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.verdicts) == 0 {
		return false, false
	}
	return r.verdicts[len(r.verdicts)-1], true
}

type env struct {
	t       *testing.T
	ctx     context.Context
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	tracker *Tracker
	calls   *recorder
}

func newEnv(t *testing.T, objs ...runtime.Object) *env {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(start)
	watches := fakewatch.Track(client)
	factory := informers.NewSharedInformerFactory(client, 0)
	tr, err := newTracker(client, factory.Storage().V1().CSIDrivers(), 0, clk)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, client: client, clock: clk, tracker: tr, calls: &recorder{}}
	tr.AddHandler(func(driver string) {
		// Handlers run on the Tracker's goroutine right after it stored
		// the verdict, so this reads the verdict being announced.
		tr.mu.Lock()
		serving := tr.verdicts[driver]
		tr.mu.Unlock()
		e.calls.record(driver, serving)
	})
	factory.Start(ctx.Done())
	tr.Start(ctx)
	factory.WaitForCacheSync(ctx.Done())
	if !tr.WaitForCacheSync(ctx) {
		t.Fatal("Lease cache never synced")
	}
	// CSIDrivers and the Tracker's Leases.
	if err := watches.Wait(ctx, 2); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		e.t.Fatalf("never %s: %v", what, err)
	}
}

func (e *env) serving() bool {
	ok, _ := e.tracker.Serving(testDriver, e.clock.Now())
	return ok
}

// settled reports whether the handlers were last told of verdict want for
// testDriver and nothing is waiting to be evaluated now. It looks at the
// handler calls, not the Tracker's state, because the Tracker stores a
// verdict before it calls the handlers.
func (e *env) settled(want bool) func() bool {
	return func() bool {
		got, called := e.calls.last()
		return called && got == want && e.tracker.queue.Len() == 0
	}
}

func TestServingFollowsTheHeartbeat(t *testing.T) {
	e := newEnv(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}})
	if ok, missing := e.tracker.Serving(testDriver, start); ok || !strings.Contains(missing, "no fenceline-attacher heartbeat Lease") {
		t.Fatalf("Serving without a Lease = %v, %q", ok, missing)
	}
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(e.ctx, heartbeat("kube-system", testDriver, "true", start), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("serving once the Lease appears", e.serving)
	e.waitFor("handler told of the new evidence", e.settled(true))
	before := e.calls.count()

	// No API event announces staleness: the Tracker's own timer must.
	e.clock.Step(16 * time.Second)
	e.waitFor("handler told of the stale evidence", func() bool { return e.calls.count() > before })
	if ok, missing := e.tracker.Serving(testDriver, e.clock.Now()); ok || !strings.Contains(missing, "stale since") {
		t.Errorf("Serving after expiry = %v, %q; want stale", ok, missing)
	}
}

func TestRenewalsDoNotCallHandlers(t *testing.T) {
	l := heartbeat("kube-system", testDriver, "true", start)
	e := newEnv(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}}, l)
	// A Lease found in the first list is no evidence until a renewal is
	// seen: it may be arbitrarily old (a restarted controller).
	e.waitFor("first verdict", e.settled(false))
	if _, missing := e.tracker.Serving(testDriver, e.clock.Now()); !strings.Contains(missing, "seen yet") {
		t.Errorf("first verdict says %q, want that no renewal was seen yet", missing)
	}
	before := e.calls.count()
	renew := func() {
		e.clock.Step(time.Second)
		l = l.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(e.clock.Now()))
		if _, err := e.client.CoordinationV1().Leases("kube-system").Update(e.ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	renew()
	e.waitFor("the first renewal seen makes evidence", e.settled(true))
	for range 2 {
		renew()
	}
	e.waitFor("last renewal cached", func() bool {
		got := e.tracker.cachedLeases(testDriver)
		return len(got) == 1 && got[0].Spec.RenewTime.Time.Equal(start.Add(3*time.Second))
	})
	// The CSIDriver going away is a change, and the barrier: its handler
	// call comes after every renewal's evaluation.
	if err := e.client.StorageV1().CSIDrivers().Delete(e.ctx, testDriver, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("CSIDriver deletion reported", e.settled(false))
	if n := e.calls.count() - before; n != 2 {
		t.Errorf("%d handler calls after the first verdict, want 2 (first renewal seen, CSIDriver gone), none for later renewals", n)
	}
}

// TestAttacherClockIsNotTrusted: renewTime is written by the attacher's
// clock. One running an hour ahead is fresh only for leaseDurationSeconds
// after its renewal was seen; one running 30 s behind is as fresh as any.
func TestAttacherClockIsNotTrusted(t *testing.T) {
	e := newEnv(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}})
	ahead := heartbeat("kube-system", testDriver, "true", start.Add(time.Hour))
	if _, err := e.client.CoordinationV1().Leases("kube-system").Create(e.ctx, ahead, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("serving once the Lease is created", e.settled(true))
	e.clock.Step(16 * time.Second)
	e.waitFor("stale 15 s after the renewal was seen, whatever renewTime claims", e.settled(false))
	behind := ahead.DeepCopy()
	behind.Spec.RenewTime = ptr.To(metav1.NewMicroTime(e.clock.Now().Add(-30 * time.Second)))
	if _, err := e.client.CoordinationV1().Leases("kube-system").Update(e.ctx, behind, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a renewal 30 s behind the controller's clock serves", e.settled(true))
}

func TestLookupIsByExactDriver(t *testing.T) {
	other := heartbeat("kube-system", "disk-example.com", "true", start) // same sanitized name
	other.Namespace = "other"
	e := newEnv(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}})
	e.create(other, heartbeat("storage", testDriver, "false", start))
	e.waitFor("both Leases cached", func() bool { return len(e.tracker.leases.GetStore().List()) == 2 })
	got := e.tracker.cachedLeases(testDriver)
	if len(got) != 1 || got[0].Namespace != "storage" {
		t.Fatalf("cachedLeases(%s) = %v, want only the Lease in namespace storage", testDriver, got)
	}
	if ok, missing := e.tracker.Serving(testDriver, start); ok || !strings.Contains(missing, "does not advertise UNPUBLISH_FENCE") {
		t.Errorf("Serving = %v, %q; want the non-fencing attacher reported", ok, missing)
	}
}

func TestServingFreshReadsTheAPI(t *testing.T) {
	e := newEnv(t, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}})
	e.create(heartbeat("kube-system", testDriver, "true", start))
	e.waitFor("serving from the cache", e.serving)
	// The API server now holds a Lease whose attacher cannot fence, which
	// the cache has not seen: the fresh variant must use what the API says.
	noFence := heartbeat("kube-system", testDriver, "false", start)
	e.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) { return true, noFence, nil })
	ok, missing, err := e.tracker.ServingFresh(e.ctx, testDriver)
	if err != nil || ok || !strings.Contains(missing, "does not advertise UNPUBLISH_FENCE") {
		t.Errorf("ServingFresh = %v, %q, %v; want the API's Lease reported", ok, missing, err)
	}
	gets := 0
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 2 {
		t.Errorf("%d GETs, want 2 (CSIDriver and Lease)", gets)
	}
}

// create creates Leases after the Tracker started: renewals it sees happen.
func (e *env) create(leases ...*coordinationv1.Lease) {
	e.t.Helper()
	for _, l := range leases {
		if _, err := e.client.CoordinationV1().Leases(l.Namespace).Create(e.ctx, l, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}
