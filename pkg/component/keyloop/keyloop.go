// Package keyloop is the one workqueue loop of Fenceline's controllers and
// of the fence agent: a rate-limited queue of keys, workers that each take
// a key and call one sync for it (never two workers on one key, as
// client-go's workqueue guarantees), and a Run that returns only once every
// worker has stopped. That last point is a safety property, not tidiness:
// a leader gives its Lease up when Run returns, and a sync still running
// then (a power-off attempt, a force deletion) would overlap the next
// leader's.
package keyloop

import (
	"context"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// SyncFunc handles one key. requeueAfter > 0 looks at the key again after
// that long (a delay that has not expired yet); an error requeues it with
// rate-limited backoff.
type SyncFunc[K comparable] func(ctx context.Context, key K) (requeueAfter time.Duration, err error)

// Config names a loop and picks its backoff.
type Config struct {
	// Name is the controller's, in logs and workqueue metrics.
	Name string
	// KeyName is the log key of a key (e.g. "node", "fencingRequest");
	// empty adds none, for a sync that names its object in its own logger.
	KeyName string
	// RetryVerbosity, when above 0, logs a failed sync at that verbosity
	// with its retry count, instead of reporting it as an error: for a sync
	// that reports its own failures where users look (Events, status), as
	// the CSI sidecars do.
	RetryVerbosity int
	// BaseDelay and MaxDelay bound the per-key exponential backoff after
	// errors; zero values take sample-controller's (5 ms and 1000 s).
	BaseDelay, MaxDelay time.Duration
	// Clock times the delays (requeue-after, backoff); nil is the real
	// clock. Tests step a fake one.
	Clock clock.WithTicker
	// SlowWait, when above 0, logs at default verbosity every key that
	// waited at least that long between its Add and a worker taking it: a
	// backlog must show where operators look without raising verbosity.
	SlowWait time.Duration
}

// Loop is a rate-limited queue of keys with its workers.
type Loop[K comparable] struct {
	cfg   Config
	clock clock.PassiveClock
	queue workqueue.TypedRateLimitingInterface[K]
	sync  SyncFunc[K]

	mu sync.Mutex
	// since holds when each key queued with Add started to wait, until a
	// worker takes it (OldestWait, SlowWait). Keys due after a delay or a
	// backoff are not waiting for a worker and are not in it.
	since map[K]time.Time
}

// New returns a loop that calls sync for each queued key.
func New[K comparable](cfg Config, sync SyncFunc[K]) *Loop[K] {
	var limiter workqueue.TypedRateLimiter[K]
	if cfg.BaseDelay > 0 && cfg.MaxDelay > 0 {
		// Per-key backoff only: a burst of failing keys must not slow the
		// others down behind a shared bucket.
		limiter = workqueue.NewTypedItemExponentialFailureRateLimiter[K](cfg.BaseDelay, cfg.MaxDelay)
	} else {
		limiter = workqueue.DefaultTypedControllerRateLimiter[K]()
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	return &Loop[K]{
		cfg:   cfg,
		clock: clk,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[K]{Name: cfg.Name, Clock: cfg.Clock}),
		sync:  sync,
		since: map[K]time.Time{},
	}
}

// Name returns the loop's name, as in its workqueue metrics.
func (l *Loop[K]) Name() string { return l.cfg.Name }

// Add queues key now.
func (l *Loop[K]) Add(key K) {
	l.mu.Lock()
	if _, ok := l.since[key]; !ok {
		l.since[key] = l.clock.Now()
	}
	l.mu.Unlock()
	l.queue.Add(key)
}

// taken ends key's wait and returns how long it was, 0 when it was not
// waiting (queued after a delay or a backoff).
func (l *Loop[K]) taken(key K) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.since[key]
	if !ok {
		return 0
	}
	delete(l.since, key)
	return l.clock.Since(t)
}

// OldestWait returns how long the key that has waited longest for a
// worker has waited, 0 when none waits: the age of a backlog, which the
// workqueue's own metrics (depth, time in queue of keys already taken)
// do not show while it grows.
func (l *Loop[K]) OldestWait() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var oldest time.Time
	for _, t := range l.since {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return l.clock.Since(oldest)
}

// AddAfter queues key after d.
func (l *Loop[K]) AddAfter(key K, d time.Duration) { l.queue.AddAfter(key, d) }

// AddRateLimited queues key after its backoff, as a failed sync does.
func (l *Loop[K]) AddRateLimited(key K) { l.queue.AddRateLimited(key) }

// Forget resets key's backoff: a change that may end its failures (a
// taint, a new CSINode) deserves a prompt retry.
func (l *Loop[K]) Forget(key K) { l.queue.Forget(key) }

// NumRequeues returns how many times key failed since its last success.
func (l *Loop[K]) NumRequeues(key K) int { return l.queue.NumRequeues(key) }

// Len returns the number of queued keys.
func (l *Loop[K]) Len() int { return l.queue.Len() }

// Drain takes every queued key out of the queue without syncing it, as if
// each sync had succeeded (its backoff reset), and returns them: tests
// step a loop by hand with it.
func (l *Loop[K]) Drain() []K {
	var keys []K
	for l.queue.Len() > 0 {
		k, quit := l.queue.Get()
		if quit {
			break
		}
		keys = append(keys, k)
		l.taken(k)
		l.queue.Forget(k)
		l.queue.Done(k)
	}
	return keys
}

// ShutDown stops the queue; Run does it when its context ends.
func (l *Loop[K]) ShutDown() { l.queue.ShutDown() }

// Run runs workers until ctx ends, then shuts the queue down and returns
// once every worker has finished its current sync.
func (l *Loop[K]) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx).WithValues("controller", l.cfg.Name)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting workers", "count", max(workers, 1))
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() { wait.UntilWithContext(ctx, l.worker, time.Second) })
	}
	<-ctx.Done()
	l.queue.ShutDown()
	wg.Wait()
	logger.Info("Workers stopped")
}

func (l *Loop[K]) worker(ctx context.Context) {
	for l.next(ctx) {
	}
}

// next syncs one key; it reports false once the queue is shut down.
func (l *Loop[K]) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	logger := klog.FromContext(ctx)
	if l.cfg.KeyName != "" {
		logger = logger.WithValues(l.cfg.KeyName, key)
	}
	if wait := l.taken(key); l.cfg.SlowWait > 0 && wait >= l.cfg.SlowWait {
		logger.Info("Key waited long for a worker: the queue has a backlog", "key", key, "wait", wait.Round(time.Millisecond), "depth", l.queue.Len())
	}
	after, err := l.sync(klog.NewContext(ctx, logger), key)
	switch {
	case err != nil && l.cfg.RetryVerbosity > 0:
		logger.V(l.cfg.RetryVerbosity).Info("Sync failed, will retry", "key", key, "err", err, "retries", l.queue.NumRequeues(key))
		l.queue.AddRateLimited(key)
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed, will retry", l.cfg.KeyName, key)
		l.queue.AddRateLimited(key)
	case after > 0:
		l.queue.Forget(key)
		l.queue.AddAfter(key, after)
	default:
		l.queue.Forget(key)
	}
	return true
}
