package controller

import (
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

func (c *Controller) vaAdded(obj any) {
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && c.ours(va) {
		c.track.remember(va)
		c.enqueue(va)
	}
}

func (c *Controller) vaUpdated(oldObj, newObj any) {
	oldVA, ok1 := oldObj.(*storagev1.VolumeAttachment)
	newVA, ok2 := newObj.(*storagev1.VolumeAttachment)
	if !ok1 || !ok2 || !c.ours(newVA) {
		return
	}
	// Whatever fence annotations either version carries are remembered
	// before anything else: a third party's edit cannot make this process
	// forget a decision it saw.
	c.track.remember(oldVA)
	c.track.remember(newVA)
	if pv := newVA.Spec.Source.PersistentVolumeName; pv != nil && newVA.DeletionTimestamp != nil &&
		slices.Contains(oldVA.Finalizers, c.finalizer) && !slices.Contains(newVA.Finalizers, c.finalizer) {
		// A detach finished: attaches held for it go now.
		c.requeueHeldAttaches(*pv)
	}
	if onlyErrorsChanged(oldVA, newVA) {
		// Our own attachError/detachError writes must not bypass the
		// backoff of the failing item.
		return
	}
	if onlyFenceAnnotationsChanged(oldVA, newVA) && len(c.track.removedFences(newVA)) == 0 {
		// A fence record or intent written (ours, or a controller's) is
		// read at the next sync; it needs no sync of its own. A removed
		// one is re-queued, to be written back at once. A controller's
		// intent makes failover work of a VolumeAttachment we attached:
		// of a waiting detach, which moves to that lane (its sync would
		// read the intent in any lane), and of one not deleted yet, whose
		// record is written ahead of its detach (recordAhead).
		if _, had := oldVA.Annotations[names.FenceIntentAnnotation]; !had && slices.Contains(newVA.Finalizers, c.finalizer) {
			if _, has := newVA.Annotations[names.FenceIntentAnnotation]; has {
				c.enqueue(newVA)
			}
		}
		return
	}
	c.enqueue(newVA)
}

// onlyErrorsChanged reports whether an update touched nothing but status
// errors and bookkeeping metadata. Periodic resyncs (same object) still
// count as a change so that they re-queue.
func onlyErrorsChanged(oldVA, newVA *storagev1.VolumeAttachment) bool {
	if oldVA.ResourceVersion == newVA.ResourceVersion {
		return false
	}
	o, n := oldVA.DeepCopy(), newVA.DeepCopy()
	for _, va := range []*storagev1.VolumeAttachment{o, n} {
		va.ResourceVersion = ""
		va.ManagedFields = nil
		va.Status.AttachError = nil
		va.Status.DetachError = nil
	}
	return equality.Semantic.DeepEqual(o, n)
}

func (c *Controller) vaDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || !c.ours(va) {
		return
	}
	c.track.forget(va.Name, va.UID)
	c.track.forgetFences(va.UID)
	c.vaQueue.Forget(va.Name)
	// The PV may now be free of VolumeAttachments and waiting for our
	// finalizer to go, and an attach to another node may be held for this
	// detach (fencing.PublishHold).
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		c.pvQueue.Add(*pv)
		c.requeueHeldAttaches(*pv)
	}
}

// requeueHeldAttaches re-queues at once the PV's attachments that wait to be
// attached, when another attachment's detach finished.
func (c *Controller) requeueHeldAttaches(pv string) {
	for _, other := range c.vasByIndex(vaByPVIndex, pv) {
		if !other.Status.Attached && other.DeletionTimestamp == nil {
			c.requeue(other)
		}
	}
}

// pvAdded handles PV adds and updates: a deleted PV may be waiting for our
// finalizer to go, and VolumeAttachments created before their PV can attach
// now rather than after their backoff.
func (c *Controller) pvAdded(obj any) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok {
		return
	}
	if pv.DeletionTimestamp != nil {
		if slices.Contains(pv.Finalizers, c.finalizer) {
			c.pvQueue.Add(pv.Name)
		}
		return
	}
	for _, va := range c.vasByIndex(vaByPVIndex, pv.Name) {
		if !va.Status.Attached && va.DeletionTimestamp == nil && va.Status.AttachError != nil {
			c.requeue(va)
		}
	}
}

// nodeUpdated re-queues the node's deleting VolumeAttachments at once when
// a reason to fence appears or changes (e.g. an out-of-service taint arrives
// while a plain unpublish keeps failing), instead of waiting out their
// backoff. A reason that disappears re-queues nothing: a detach decided
// fenced stays fenced (fencing.Record), and one not yet decided gains
// nothing from hurrying.
func (c *Controller) nodeUpdated(oldObj, newObj any) {
	oldNode, ok1 := oldObj.(*v1.Node)
	newNode, ok2 := newObj.(*v1.Node)
	if !ok1 || !ok2 {
		return
	}
	if !reasonAppeared(oldNode, newNode, cutoff.SafeDetachEnabled(c.csiDriver())) {
		return
	}
	c.requeueDeleting(c.vasByIndex(vaByNodeIndex, newNode.Name))
}

// reasonAppeared reports whether a node update brings a reason to fence that
// the node did not have before.
func reasonAppeared(oldNode, newNode *v1.Node, safeDetach bool) bool {
	r := cutoff.NodeReason(newNode, safeDetach)
	return r != cutoff.ReasonNone && r != cutoff.NodeReason(oldNode, safeDetach)
}

// nodeDeleted re-queues the node's deleting VolumeAttachments: a Node object
// that is gone is a reason to fence for a driver that can.
func (c *Controller) nodeDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if node, ok := obj.(*v1.Node); ok {
		c.requeueDeleting(c.vasByIndex(vaByNodeIndex, node.Name))
	}
}

// csiNodeChanged retries attaches that were waiting for the node's CSINode.
func (c *Controller) csiNodeChanged(obj any) {
	csiNode, ok := obj.(*storagev1.CSINode)
	if !ok {
		return
	}
	for _, va := range c.vasByIndex(vaByNodeIndex, csiNode.Name) {
		if !va.Status.Attached && va.DeletionTimestamp == nil {
			c.requeue(va)
		}
	}
}

// csiDriverUpdated re-queues deleting VolumeAttachments when the driver
// opts into safe detach (removing the opt-in re-queues nothing, as for
// nodes). It lists from the cache, which is fine for an
// event this rare.
func (c *Controller) csiDriverUpdated(oldObj, newObj any) {
	oldD, ok1 := oldObj.(*storagev1.CSIDriver)
	newD, ok2 := newObj.(*storagev1.CSIDriver)
	if !ok1 || !ok2 || newD.Name != c.cfg.DriverName ||
		cutoff.SafeDetachEnabled(oldD) || !cutoff.SafeDetachEnabled(newD) {
		return
	}
	vas, err := c.vaLister.List(everything)
	if err != nil {
		return
	}
	c.requeueDeleting(vas)
}

func (c *Controller) requeueDeleting(vas []*storagev1.VolumeAttachment) {
	for _, va := range vas {
		if needsDetach(va, c.cfg.DriverName, c.finalizer) {
			c.requeue(va)
		}
	}
}

// tracker holds the little in-memory state the controller needs between
// syncs. Losing it (restart) only costs a repeated idempotent call or Event.
type tracker struct {
	mu sync.Mutex
	// superseded maps a VolumeAttachment name to the resourceVersions our
	// writes replaced since the cache last caught up. A sync that still sees
	// one of them in the informer cache would act on stale data (e.g.
	// unpublish twice); it waits for the update event instead.
	superseded map[string]map[string]bool
	// forceAttach holds names the reconciler found attached in the API but
	// not published by the driver.
	forceAttach map[string]bool
	// warnedUnsupported holds VolumeAttachments that already got a
	// FenceUnsupported Event.
	warnedUnsupported map[types.UID]bool
	// loggedMigration holds objects already reported as unsupported CSI
	// migration cases.
	loggedMigration map[string]bool
	// fences holds, per VolumeAttachment UID, every fence annotation value
	// seen on it (see remember): a decision is never forgotten.
	fences map[types.UID]map[string]string
}

func newTracker() tracker {
	return tracker{
		superseded:        map[string]map[string]bool{},
		forceAttach:       map[string]bool{},
		warnedUnsupported: map[types.UID]bool{},
		loggedMigration:   map[string]bool{},
		fences:            map[types.UID]map[string]string{},
	}
}

func (t *tracker) supersede(name, oldRV, newRV string) {
	if oldRV == newRV {
		return
	}
	t.markStale(name, oldRV)
}

// markStale marks a version as replaced even when the API answered with the
// same resourceVersion: removing the last finalizer of a deleted object
// returns the object as it was before the deletion, yet that version will
// never be current again and a DELETED event follows.
func (t *tracker) markStale(name, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.superseded[name] == nil {
		t.superseded[name] = map[string]bool{}
	}
	t.superseded[name][rv] = true
}

// isStale reports whether the cached object is a version our own writes
// replaced. Any other version means the cache caught up (or moved past us),
// and the marks are dropped.
func (t *tracker) isStale(va *storagev1.VolumeAttachment) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	rvs, ok := t.superseded[va.Name]
	if !ok {
		return false
	}
	if rvs[va.ResourceVersion] {
		return true
	}
	delete(t.superseded, va.Name)
	return false
}

func (t *tracker) forget(name string, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.superseded, name)
	delete(t.forceAttach, name)
	delete(t.warnedUnsupported, uid)
}

func (t *tracker) setForceAttach(name string, v bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v {
		t.forceAttach[name] = true
	} else {
		delete(t.forceAttach, name)
	}
}

func (t *tracker) isForceAttach(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forceAttach[name]
}

// firstUnsupportedWarning returns true exactly once per VolumeAttachment.
func (t *tracker) firstUnsupportedWarning(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.warnedUnsupported[uid] {
		return false
	}
	t.warnedUnsupported[uid] = true
	return true
}

// firstMigrationLog returns true exactly once per key.
func (t *tracker) firstMigrationLog(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loggedMigration[key] {
		return false
	}
	t.loggedMigration[key] = true
	return true
}
