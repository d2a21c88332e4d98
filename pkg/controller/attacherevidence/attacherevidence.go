// Package attacherevidence tells fenceline-controller whether a
// fence-capable fenceline-attacher currently serves a CSI driver, from the
// heartbeat Leases the attachers renew (pkg/attacher/heartbeat) and the
// driver's CSIDriver object, by the rule cutoff.AttacherServes.
//
// Quarantine force-deletes pods and releases volumes only because the
// attacher fences the detach that follows. The leader-election Lease is
// shared with the upstream external-attacher and proves nothing, so the
// controller needs this positive, fresh evidence before it acts.
package attacherevidence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/renewals"
	"fenceline.io/fenceline/pkg/names"
)

// driverIndex indexes heartbeat Leases by the exact driver name they claim.
const driverIndex = "driver"

// recheckSlack is added to a Lease's expiry before the verdict is looked at
// again, so that the check lands after, not on, the expiry.
const recheckSlack = 100 * time.Millisecond

// Tracker caches heartbeat Leases cluster-wide (only those carrying the
// names.DriverLabel label) and answers whether a driver is served. It tells
// registered handlers when a driver's verdict changes, including when a
// Lease goes stale, which no API event announces.
type Tracker struct {
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	leases  cache.SharedIndexInformer
	drivers storagelisters.CSIDriverLister
	clock   clock.Clock
	queue   *keyloop.Loop[string]
	// renewals is when each heartbeat Lease was seen renewed, on the
	// controller's clock: the attacher's renewTime is never compared with
	// it (cutoff.Heartbeat).
	renewals *renewals.Tracker

	mu       sync.Mutex
	verdicts map[string]bool
	handlers []func(driver string)
}

// New creates a Tracker. csiDrivers is usually the controller's shared
// informer (call New before that factory starts); the Lease informer is
// the Tracker's own, filtered by label, and starts with Start.
func New(client kubernetes.Interface, csiDrivers storageinformers.CSIDriverInformer, resync time.Duration) (*Tracker, error) {
	return newTracker(client, csiDrivers, resync, clock.RealClock{})
}

func newTracker(client kubernetes.Interface, csiDrivers storageinformers.CSIDriverInformer, resync time.Duration, clk clock.WithTicker) (*Tracker, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = names.DriverLabel }))
	t := &Tracker{
		client:   client,
		factory:  factory,
		leases:   factory.Coordination().V1().Leases().Informer(),
		drivers:  csiDrivers.Lister(),
		clock:    clk,
		renewals: renewals.NewTracker(clk.Now),
		verdicts: map[string]bool{},
	}
	// One worker: the handlers hear a driver's verdicts in order.
	t.queue = keyloop.New(keyloop.Config{Name: "attacher-evidence", KeyName: "driver", Clock: clk}, t.sync)
	if err := t.leases.AddIndexers(cache.Indexers{driverIndex: leaseDriver}); err != nil {
		return nil, fmt.Errorf("adding heartbeat Lease index: %w", err)
	}
	// A renewal is observed before its driver is looked at, in the same
	// handler: the verdict never reads a Lease whose renewal it missed.
	if _, err := t.leases.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { t.renewals.OnAdd(obj, initial); t.enqueueLease(obj) },
		UpdateFunc: func(old, cur any) { t.renewals.OnUpdate(old, cur); t.enqueueLease(old); t.enqueueLease(cur) },
		DeleteFunc: func(obj any) { t.renewals.OnDelete(obj); t.enqueueLease(obj) },
	}); err != nil {
		return nil, fmt.Errorf("adding heartbeat Lease event handler: %w", err)
	}
	if _, err := csiDrivers.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.enqueueDriver(obj) },
		UpdateFunc: func(_, cur any) { t.enqueueDriver(cur) },
		DeleteFunc: func(obj any) { t.enqueueDriver(obj) },
	}); err != nil {
		return nil, fmt.Errorf("adding CSIDriver event handler: %w", err)
	}
	return t, nil
}

// AddHandler registers f, called with a driver's name whenever its verdict
// changes (evidence appears, goes stale or is refused for another reason),
// and once for each driver first seen. Register before Start. f runs on the
// Tracker's goroutine and must not block (enqueue work, do not do it).
func (t *Tracker) AddHandler(f func(driver string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handlers = append(t.handlers, f)
}

// Start starts the Lease informer and the goroutine that re-evaluates
// drivers, until ctx ends.
func (t *Tracker) Start(ctx context.Context) {
	t.factory.Start(ctx.Done())
	go func() {
		t.queue.Run(ctx, 1)
		t.factory.Shutdown()
	}()
}

// HasSynced reports whether the Lease cache has synced.
func (t *Tracker) HasSynced() bool { return t.leases.HasSynced() }

// WaitForCacheSync waits until the Lease cache has synced or ctx ends.
func (t *Tracker) WaitForCacheSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), t.leases.HasSynced)
}

// Serving reports, from cached data, whether a fence-capable
// fenceline-attacher currently serves driver, and if not what is missing.
func (t *Tracker) Serving(driver string, now time.Time) (ok bool, missing string) {
	ev := t.evidence(driver, now)
	return ev.Serving, ev.Missing
}

// ServingFresh is Serving on data read from the API server just now: the
// CSIDriver and every heartbeat Lease the cache knows for driver. Call it
// right before a destructive write, so that a verdict is not based on a
// cache that lags behind a stopped attacher. A Lease the cache has not seen
// yet is not looked for: the answer can only be a refusal, and the handler
// fires once it arrives.
func (t *Tracker) ServingFresh(ctx context.Context, driver string) (ok bool, missing string, err error) {
	csiDriver, err := t.client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		csiDriver = nil
	case err != nil:
		return false, "", fmt.Errorf("reading CSIDriver %s: %w", driver, err)
	}
	var fresh []cutoff.Heartbeat
	for _, cached := range t.cachedLeases(driver) {
		l, err := t.client.CoordinationV1().Leases(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, "", fmt.Errorf("reading heartbeat Lease %s/%s: %w", cached.Namespace, cached.Name, err)
		}
		fresh = append(fresh, t.heartbeat(l))
	}
	ev := cutoff.AttacherServes(driver, fresh, csiDriver, t.clock.Now())
	return ev.Serving, ev.Missing, nil
}

func (t *Tracker) evidence(driver string, now time.Time) cutoff.Evidence {
	csiDriver, err := t.drivers.Get(driver)
	if err != nil {
		csiDriver = nil // NotFound is the only error a lister returns
	}
	cached := t.cachedLeases(driver)
	hbs := make([]cutoff.Heartbeat, 0, len(cached))
	for _, l := range cached {
		hbs = append(hbs, t.heartbeat(l))
	}
	return cutoff.AttacherServes(driver, hbs, csiDriver, now)
}

// heartbeat is the Lease with its renewal as the Tracker observed it. A
// fresh read that shows a renewal the cache has not delivered yet counts
// as observed now.
func (t *Tracker) heartbeat(l *coordinationv1.Lease) cutoff.Heartbeat {
	o := t.renewals.Observe(l)
	return cutoff.Heartbeat{Lease: l, ObservedAt: o.ObservedAt, Renewed: o.Renewed}
}

func (t *Tracker) cachedLeases(driver string) []*coordinationv1.Lease {
	objs, err := t.leases.GetIndexer().ByIndex(driverIndex, driver)
	if err != nil {
		return nil // only for an unknown index name
	}
	out := make([]*coordinationv1.Lease, 0, len(objs))
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok {
			out = append(out, l)
		}
	}
	return out
}

// sync re-evaluates one driver, tells the handlers if its verdict changed,
// and schedules the next look for when its evidence expires.
func (t *Tracker) sync(ctx context.Context, driver string) (time.Duration, error) {
	now := t.clock.Now()
	ev := t.evidence(driver, now)
	var after time.Duration
	if ev.Serving {
		after = max(ev.Until.Sub(now), 0) + recheckSlack
	}
	t.mu.Lock()
	prev, seen := t.verdicts[driver]
	t.verdicts[driver] = ev.Serving
	handlers := t.handlers
	t.mu.Unlock()
	if seen && prev == ev.Serving {
		return after, nil
	}
	klog.FromContext(ctx).V(2).Info("Attacher evidence changed", "driver", driver, "serving", ev.Serving, "missing", ev.Missing)
	for _, h := range handlers {
		h(driver)
	}
	return after, nil
}

func (t *Tracker) enqueueLease(obj any) {
	if d, err := leaseDriver(tombstone(obj)); err == nil && len(d) == 1 {
		t.queue.Add(d[0])
	}
}

func (t *Tracker) enqueueDriver(obj any) {
	if d, ok := tombstone(obj).(*storagev1.CSIDriver); ok {
		t.queue.Add(d.Name)
	}
}

func tombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// leaseDriver is the index function: the exact driver name a heartbeat
// Lease claims (names.HeartbeatDriverAnnotation), or none.
func leaseDriver(obj any) ([]string, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, errors.New("not a Lease")
	}
	if d := l.Annotations[names.HeartbeatDriverAnnotation]; d != "" {
		return []string{d}, nil
	}
	return nil, nil
}
