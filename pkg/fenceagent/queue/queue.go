// Package queue is the informer -> rate-limited workqueue -> sync loop of
// the fence agent's controllers (the FenceTarget probe, the FencingRequest
// executor): objects are keyed by name, and one worker at a time syncs a
// given name.
package queue

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/keyloop"
)

// SyncFunc handles one object by name; an error requeues it with
// rate-limited backoff.
type SyncFunc func(ctx context.Context, name string) error

// Queue is a rate-limited queue of object names with its sync loop
// (keyloop.Loop: Run returns once every worker has stopped, so that the
// leader's Lease is never given up while a power-off attempt runs).
type Queue struct {
	loop *keyloop.Loop[string]
}

// New creates a queue. name is the controller's, in logs and workqueue
// metrics; kind is the log key of a queued name (e.g. "fenceTarget").
func New(name, kind string, sync SyncFunc) *Queue {
	return &Queue{loop: keyloop.New(keyloop.Config{Name: name, KeyName: kind}, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, sync(ctx, key)
	})}
}

// Add queues name now.
func (q *Queue) Add(name string) { q.loop.Add(name) }

// AddAfter queues name after d.
func (q *Queue) AddAfter(name string, d time.Duration) { q.loop.AddAfter(name, d) }

// ShutDown stops the queue; Run does it when its context ends.
func (q *Queue) ShutDown() { q.loop.ShutDown() }

// Enqueue queues an informer object (a tombstone included) by its key.
func (q *Queue) Enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	q.loop.Add(key)
}

// Run waits for the caches, logs msg with keysAndValues, and runs workers
// until ctx ends; it returns once every worker has stopped.
func (q *Queue) Run(ctx context.Context, workers int, synced []cache.InformerSynced, msg string, keysAndValues ...any) {
	defer utilruntime.HandleCrashWithContext(ctx)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, synced...) {
		q.loop.ShutDown()
		return
	}
	klog.FromContext(ctx).Info(msg, append(keysAndValues, "workers", workers)...)
	q.loop.Run(ctx, workers)
}

// Watch is an informer and the handler to add to it; a nil handler adds
// none (the informer is only read).
type Watch struct {
	Informer cache.SharedIndexInformer
	Handler  cache.ResourceEventHandler
}

// AddHandlers adds each watch's handler and returns the informers'
// HasSynced, for Run.
func AddHandlers(name string, watches ...Watch) ([]cache.InformerSynced, error) {
	synced := make([]cache.InformerSynced, 0, len(watches))
	for _, w := range watches {
		if w.Handler != nil {
			if _, err := w.Informer.AddEventHandler(w.Handler); err != nil {
				return nil, fmt.Errorf("adding %s event handler: %w", name, err)
			}
		}
		synced = append(synced, w.Informer.HasSynced)
	}
	return synced, nil
}

// OnChange calls f with each added, deleted (a tombstone's object
// included) or changed object; a resync (same resource version) is no
// change.
func OnChange(f func(metav1.Object)) cache.ResourceEventHandler {
	each := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if o, ok := obj.(metav1.Object); ok {
			f(o)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: each, DeleteFunc: each, UpdateFunc: func(old, cur any) {
		if o, ok := old.(metav1.Object); ok {
			if n, ok := cur.(metav1.Object); ok && o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
		}
		each(cur)
	}}
}
