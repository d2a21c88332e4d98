// Package nodequeue is the informer -> rate-limited workqueue -> sync loop
// shared by the Fenceline controllers. Every controller is keyed by node
// name: an event on a pod, a VolumeAttachment or the node itself enqueues the
// node, and one sync looks at that node and its pods through indexed
// informer lookups. Keying by node bounds the work per event to one node,
// whatever the size of the cluster.
package nodequeue

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/pkg/component/keyloop"
)

// SyncFunc handles one node. It returns requeueAfter > 0 to look again
// later (e.g. when a delay has not expired yet); an error requeues with
// rate-limited backoff.
type SyncFunc = keyloop.SyncFunc[string]

// Queue is a rate-limited queue of node names with a sync loop
// (keyloop.Loop: Run returns once every worker has stopped).
type Queue struct {
	loop *keyloop.Loop[string]
}

// New creates a queue; name appears in logs and workqueue metrics.
func New(name string, sync SyncFunc) *Queue {
	return &Queue{loop: keyloop.New(keyloop.Config{Name: name, KeyName: "node", BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Minute}, sync)}
}

// Enqueue adds a node to the queue.
func (q *Queue) Enqueue(nodeName string) {
	if nodeName != "" {
		q.loop.Add(nodeName)
	}
}

// Len returns the number of queued nodes.
func (q *Queue) Len() int { return q.loop.Len() }

// Run processes the queue with the given number of workers until ctx ends
// and returns once they stopped.
func (q *Queue) Run(ctx context.Context, workers int) { q.loop.Run(ctx, workers) }

// NodeHandler returns informer handlers that enqueue a node when it is
// added, changes in a way filter cares about, or is deleted. A nil filter
// enqueues on every update (resyncs included).
func (q *Queue) NodeHandler(filter func(old, cur *v1.Node) bool) cache.ResourceEventHandler {
	return objectHandler(q, func(n *v1.Node) string { return n.Name }, filter)
}

// NodeObserver records something of every node's latest state before the
// node is enqueued (a TaintClock; a nil node means it was deleted).
type NodeObserver interface {
	Observe(name string, node *v1.Node)
}

// ClockedNodeHandler is NodeHandler for a controller that also times a
// taint: every node event first updates clock with the node's latest state
// (a deleted node is forgotten), then enqueues the node as NodeHandler(changed)
// would. Updating the clock before enqueueing means a sync triggered by the
// event already sees when the taint was first observed.
func (q *Queue) ClockedNodeHandler(clock NodeObserver, changed func(old, cur *v1.Node) bool) cache.ResourceEventHandler {
	h := q.NodeHandler(changed)
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok {
				clock.Observe(n.Name, n)
			}
			h.OnAdd(obj, false)
		},
		UpdateFunc: func(oldObj, newObj any) {
			if n, ok := newObj.(*v1.Node); ok {
				clock.Observe(n.Name, n)
			}
			h.OnUpdate(oldObj, newObj)
		},
		DeleteFunc: func(obj any) {
			if n, ok := DeletedObject[*v1.Node](obj); ok {
				clock.Observe(n.Name, nil)
			}
			h.OnDelete(obj)
		},
	}
}

// PodHandler returns informer handlers that enqueue the node of a pod that
// is added, changes in a way filter cares about, or is deleted.
func (q *Queue) PodHandler(filter func(old, cur *v1.Pod) bool) cache.ResourceEventHandler {
	return objectHandler(q, func(p *v1.Pod) string { return p.Spec.NodeName }, filter)
}

// objectHandler enqueues nodeOf(obj) when an object of type T is added,
// deleted, resynced, or updated in a way filter (nil: any) cares about.
func objectHandler[T metav1.Object](q *Queue, nodeOf func(T) string, filter func(old, cur T) bool) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				q.Enqueue(nodeOf(o))
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(T)
			n, ok2 := newObj.(T)
			if !ok1 || !ok2 {
				return
			}
			if filter == nil || o.GetResourceVersion() == n.GetResourceVersion() || filter(o, n) {
				q.Enqueue(nodeOf(n))
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := DeletedObject[T](obj); ok {
				q.Enqueue(nodeOf(o))
			}
		},
	}
}

// VAHandler returns informer handlers that enqueue the node of a
// VolumeAttachment whenever one is added or deleted.
func (q *Queue) VAHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if va, ok := obj.(*storagev1.VolumeAttachment); ok {
				q.Enqueue(va.Spec.NodeName)
			}
		},
		DeleteFunc: func(obj any) {
			if va, ok := DeletedObject[*storagev1.VolumeAttachment](obj); ok {
				q.Enqueue(va.Spec.NodeName)
			}
		},
	}
}

// DeletedObject returns the object of an informer delete event as a T,
// unwrapping the cache.DeletedFinalStateUnknown tombstone the informer hands
// over when it missed the deletion itself.
func DeletedObject[T any](obj any) (T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(T)
	return o, ok
}

// AddHandler registers h on inf, wrapping the error with context.
func AddHandler(inf cache.SharedIndexInformer, what string, h cache.ResourceEventHandler) error {
	if _, err := inf.AddEventHandler(h); err != nil {
		return fmt.Errorf("adding %s event handler: %w", what, err)
	}
	return nil
}
