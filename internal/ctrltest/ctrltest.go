// Package ctrltest is the one fixture the controllers' sync tests run on:
// fake kube and fencing clientsets holding the test's objects, shared
// informer factories the controller is wired to, a fake clock, a
// FakeRecorder and an actuator.Actuator on the fake client. A test states
// objects in and reads writes and Events out:
//
//	f := ctrltest.New(t, testobj.Epoch, node, pod)
//	c, err := podgc.New(f.Informers, f.Actuator)
//	f.Start()
//	r := f.Sync(c.sync, "n1")
//	r.Check(t, ctrltest.Want{
//		Writes: [][]string{{"patch volumeattachments va-1"}, {"update pods/status ns/db-0"}, {"delete pods ns/db-0"}},
//		Events: []string{"FencelineFenceIntentRecorded", "Warning FencelineForceDeleted"},
//	})
//
// Writes come in steps: every write of a step before every write of the
// next, so a table states "the intent before the deletion" without fixing
// the order of writes a controller makes in parallel.
//
// The fakes run no admission, no defaulting, no CEL and no graceful
// deletion (a delete removes the object at once), and an update writes the
// status too: what the tests check is the controller's logic, not the API
// server's.
package ctrltest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"fenceline.io/fenceline/internal/fakewatch"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/cutoff"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	fencingscheme "fenceline.io/fenceline/pkg/generated/clientset/versioned/scheme"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

// eventBuffer is the FakeRecorder's capacity: its Event calls block when
// it is full, so it is far larger than any sync records.
const eventBuffer = 1000

// Fixture is one controller's world of fakes. Wire the controller to its
// factories, clients, Recorder, Actuator and Clock, then call Start.
type Fixture struct {
	T   testing.TB
	Ctx context.Context
	// Kube holds the core objects, Fencing the fencing API's.
	Kube    *kubefake.Clientset
	Fencing *fencingfake.Clientset
	// Informers is the cluster-wide factory of Kube, NodeLeases Kube's
	// factory restricted to kube-node-lease, FencingInformers Fencing's.
	Informers        informers.SharedInformerFactory
	NodeLeases       informers.SharedInformerFactory
	FencingInformers fencinginformers.SharedInformerFactory
	// Clock is the time the controller and the Actuator read.
	Clock *clocktesting.FakeClock
	// Recorder records every Event (the Actuator's too).
	Recorder *record.FakeRecorder
	// Metrics are registered on a registry of the test's own.
	Metrics *metrics.Metrics
	// Actuator writes through Kube, records on Recorder, counts on
	// Metrics and reads Clock.
	Actuator *actuator.Actuator

	cancel  context.CancelFunc
	watches *fakewatch.Watches
	writes  *writeLog
	// caches are the started informers, compared with the API by Settle.
	caches []cached
}

// New puts the objects into the fake API servers (the fencing API's types
// into Fencing, every other object into Kube) and sets the clock to now.
// Nothing runs until Start.
func New(t testing.TB, now time.Time, objs ...runtime.Object) *Fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	var kubeObjs, fencingObjs []runtime.Object
	for _, o := range objs {
		if _, _, err := fencingscheme.Scheme.ObjectKinds(o); err == nil {
			fencingObjs = append(fencingObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{
		T: t, Ctx: ctx,
		Kube: kubefake.NewClientset(kubeObjs...),
		// NewClientset tracks managed fields with a schema the CRDs do
		// not have.
		Fencing:  fencingfake.NewSimpleClientset(fencingObjs...),
		Clock:    clocktesting.NewFakeClock(now),
		Recorder: record.NewFakeRecorder(eventBuffer),
		Metrics:  m,
		writes:   &writeLog{},
		cancel:   cancel,
	}
	f.Actuator = &actuator.Actuator{Client: f.Kube, Recorder: f.Recorder, Metrics: m, Now: f.Clock.Now}
	var created atomic.Int32
	for _, c := range []interface {
		PrependReactor(verb, resource string, reaction clienttesting.ReactionFunc)
	}{f.Kube, f.Fencing} {
		// Prepended last, the create reaction runs first: the log sees
		// the name the API server gave.
		c.PrependReactor("*", "*", f.writes.record)
		c.PrependReactor("create", "*", f.apiServerCreate(&created))
	}
	f.watches = fakewatch.Track(f.Kube, f.Fencing)
	f.Informers = informers.NewSharedInformerFactory(f.Kube, 0)
	f.NodeLeases = informers.NewSharedInformerFactoryWithOptions(f.Kube, 0, informers.WithNamespace(v1.NamespaceNodeLease))
	f.FencingInformers = fencinginformers.NewSharedInformerFactory(f.Fencing, 0)
	return f
}

// apiServerCreate does for a created object what the API server does and
// the fakes do not: a name from generateName, a UID and a creation time.
func (f *Fixture) apiServerCreate(n *atomic.Int32) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(clienttesting.CreateAction)
		if !ok {
			return false, nil, nil
		}
		obj, err := meta.Accessor(ca.GetObject())
		if err != nil {
			return false, nil, nil
		}
		i := n.Add(1)
		if obj.GetName() == "" && obj.GetGenerateName() != "" {
			obj.SetName(fmt.Sprintf("%s%05d", obj.GetGenerateName(), i))
		}
		if obj.GetUID() == "" {
			obj.SetUID(types.UID(fmt.Sprintf("uid-created-%d", i)))
		}
		if ts := obj.GetCreationTimestamp(); ts.IsZero() {
			obj.SetCreationTimestamp(metav1.NewTime(f.Clock.Now()))
		}
		return false, nil, nil // the tracker stores it
	}
}

// Start starts the factories' informers (those the controller asked for),
// waits until their caches synced and their watches run, so that a change
// the test makes from now on reaches them. It does not wait for the event
// handlers: a controller that keeps state from them (when a Lease was seen
// renewed) is waited for on its handler registration's HasSynced.
func (f *Fixture) Start() {
	f.T.Helper()
	done := f.Ctx.Done()
	f.Informers.Start(done)
	f.NodeLeases.Start(done)
	f.FencingInformers.Start(done)
	f.T.Cleanup(func() {
		f.cancel() // the informers stop only once their context ends
		f.Informers.Shutdown()
		f.NodeLeases.Shutdown()
		f.FencingInformers.Shutdown()
	})
	kubeTracker, fencingTracker := f.Kube.Tracker(), f.Fencing.Tracker()
	f.caches = nil
	f.caches = append(f.caches, startedCaches(f.T, f.Informers.WaitForCacheSync(done), f.Informers.InformerFor, kubeTracker, kubescheme.Scheme, "")...)
	f.caches = append(f.caches, startedCaches(f.T, f.NodeLeases.WaitForCacheSync(done), f.NodeLeases.InformerFor, kubeTracker, kubescheme.Scheme, v1.NamespaceNodeLease)...)
	f.caches = append(f.caches, startedCaches(f.T, f.FencingInformers.WaitForCacheSync(done), f.FencingInformers.InformerFor, fencingTracker, fencingscheme.Scheme, "")...)
	if err := f.watches.Wait(f.Ctx, len(f.caches)); err != nil {
		f.T.Fatal(err)
	}
}

// SyncFunc is a controller's sync of one key (a node's name).
type SyncFunc func(ctx context.Context, key string) (time.Duration, error)

// Result is what one sync did.
type Result struct {
	// After and Err are what the sync returned.
	After time.Duration
	Err   error
	// Writes are the writes it sent to the fake API servers, in order.
	Writes []Write
	// Events are the Events it recorded ("Type Reason Message").
	Events []string
}

// Sync runs one sync of key once the caches hold what the API servers
// hold, and returns what that sync wrote and recorded (writes and Events
// from before it are dropped). It waits for the caches again afterwards,
// so that the next sync decides on the writes.
func (f *Fixture) Sync(sync SyncFunc, key string) Result {
	f.T.Helper()
	f.Settle()
	f.Writes()
	f.Events()
	after, err := sync(f.Ctx, key)
	r := Result{After: after, Err: err, Writes: f.Writes(), Events: f.Events()}
	f.Settle()
	return r
}

// Events drains the Events recorded so far.
func (f *Fixture) Events() []string { return Drain(f.Recorder) }

// Drain returns the Events a FakeRecorder holds (a controller's second
// recorder, say) and empties it.
func Drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-r.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// CacheMisses makes the API server's lists of VolumeAttachments return vas
// too, which the started caches never see: a cache lagging behind the API
// server, for the write-time re-checks that must read fresh. Call it after
// Start.
func (f *Fixture) CacheMisses(vas ...*storagev1.VolumeAttachment) {
	gvr, gvk := storagev1.SchemeGroupVersion.WithResource("volumeattachments"), storagev1.SchemeGroupVersion.WithKind("VolumeAttachment")
	f.Kube.PrependReactor("list", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
		obj, err := f.Kube.Tracker().List(gvr, gvk, "")
		if err != nil {
			return true, nil, err
		}
		list := obj.(*storagev1.VolumeAttachmentList)
		for _, va := range vas {
			list.Items = append(list.Items, *va.DeepCopy())
		}
		return true, list, nil
	})
}

// Writes drains the writes sent to the fake API servers so far.
func (f *Fixture) Writes() []Write { return f.writes.drain() }

// Intent returns the reason of the fence intent on the VolumeAttachment as
// the API server has it; "" when it has none or is gone.
func (f *Fixture) Intent(va string) cutoff.Reason {
	f.T.Helper()
	got, err := f.Kube.StorageV1().VolumeAttachments().Get(f.Ctx, va, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	r, err := cutoff.IntentOf(got)
	if err != nil {
		f.T.Fatalf("VolumeAttachment %s: %v", va, err)
	}
	if r == nil {
		return ""
	}
	return r.Reason
}
