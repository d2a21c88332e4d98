package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// needsDetach states when a VolumeAttachment may be detached at all: it
// belongs to this driver, it is being deleted, and it still carries our
// finalizer (without it there was no ControllerPublishVolume of ours, or the
// detach already succeeded). The finalizer itself is only ever removed after
// a successful ControllerUnpublishVolume.
func needsDetach(va *storagev1.VolumeAttachment, driver, finalizer string) bool {
	return va != nil && va.Spec.Attacher == driver && va.DeletionTimestamp != nil && slices.Contains(va.Finalizers, finalizer)
}

// syncDetach runs ControllerUnpublishVolume as fencing.Decide says (fenced,
// plain, or refused), recording a fenced decision on the VolumeAttachment
// before the first call, then removes the finalizer before touching status,
// as upstream does, so that a second sync cannot unpublish twice.
func (c *Controller) syncDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	if !needsDetach(va, c.cfg.DriverName, c.finalizer) {
		return nil
	}
	volumeID, secrets, err := c.detachVolume(ctx, va)
	if err != nil {
		c.detachFailed(ctx, va, EventDetachFailed, err)
		return err
	}
	va, known, decision, err := c.decideDetach(ctx, va, nodeutil.CSIUniqueVolumeName(c.cfg.DriverName, volumeID))
	if err != nil {
		c.detachFailed(ctx, va, EventDetachFailed, err)
		return err
	}
	// A refused detach names the node ID a fenced one would target.
	nodeID, err := fencing.DetachNodeID(decision.Action != fencing.ActionPlain, known.record, known.intent,
		va.Annotations[names.NodeIDAnnotation], c.csiNodeID(va.Spec.NodeName))
	if err != nil {
		err = fmt.Errorf("node %q: %w", va.Spec.NodeName, err)
		c.detachFailed(ctx, va, EventDetachFailed, err)
		return err
	}
	// Every log line of this detach, including those of detachFailed and
	// finishDetach, names what it acts on.
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumeID", volumeID, "nodeID", nodeID, "mode", decision.Action, "reason", decision.Reason))
	if known.intent != nil && decision.Action == fencing.ActionFenced {
		klog.FromContext(ctx).V(2).Info("Fence intent recorded before the detach was caused", "intent", known.intent.Encode())
	}
	switch {
	case decision.Action == fencing.ActionRefuse:
		c.cfg.Metrics.Detach(string(fencing.ActionFenced), string(decision.Reason), metrics.ResultRefused)
		err := fmt.Errorf("detach of %s from node %s refused: %s", volumeID, va.Spec.NodeName, decision.Why)
		c.detachFailed(ctx, va, EventFenceRequired, err)
		return err
	case decision.Unsupported && c.track.firstUnsupportedWarning(va.UID):
		c.volumeEvent(va, v1.EventTypeWarning, EventFenceUnsupported, fmt.Sprintf("Node %s: %s (driver %s)", va.Spec.NodeName, decision.Why, c.cfg.DriverName))
	}
	if decision.WriteRecord {
		if va, err = c.writeRecord(ctx, va, fencing.NewRecord(decision.Reason, nodeID, time.Now())); err != nil {
			c.detachFailed(ctx, va, EventDetachFailed, err)
			return err
		}
	}
	fenced := decision.Action == fencing.ActionFenced

	callCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	err = c.cfg.CSI.Unpublish(callCtx, volumeID, nodeID, secrets, fenced)
	cancel()
	if fencing.FencedByAbsence(fenced, err) {
		// The fence extension's contract: a node ID (or volume) the array
		// does not know holds no access to the volume, so the fence is in
		// effect. Retrying could never succeed (a re-installed node's old
		// ID is gone for good).
		klog.FromContext(ctx).Info("Driver does not know the node ID or volume of a fenced detach: nothing can reach the volume through it; detached", "err", err)
		err = nil
	}
	if err != nil {
		c.cfg.Metrics.Detach(string(decision.Action), string(decision.Reason), metrics.ResultError)
		err = fmt.Errorf("ControllerUnpublishVolume (%s) of %s from node %s: %w", decision.Action, volumeID, nodeID, err)
		c.detachFailed(ctx, va, EventDetachFailed, err)
		return err
	}
	c.cfg.Metrics.Detach(string(decision.Action), string(decision.Reason), metrics.ResultSuccess)
	return c.finishDetach(ctx, va, volumeID, decision)
}

// knownFence is what the detach knows of earlier decisions: the attacher's
// own record and a controller's intent, from the VolumeAttachment or, when a
// third party removed them, from this process's memory.
type knownFence struct {
	record, intent *fencing.Record
}

// decideDetach gathers the inputs of fencing.Decide and calls it: from the
// informer caches first and, when that points to a plain detach by a driver
// that can fence, again from a fresh read of the Node (and, where the
// decision depends on it, the CSIDriver), so that a lagging watch cannot
// hide a reason to fence. A record or intent this process saw on the
// VolumeAttachment and that is gone now is written back first
// (restoreFences): a decision is never forgotten. volume is the volume's
// name in node status.
func (c *Controller) decideDetach(ctx context.Context, va *storagev1.VolumeAttachment, volume v1.UniqueVolumeName) (*storagev1.VolumeAttachment, knownFence, fencing.Decision, error) {
	va, known, err := c.restoreFences(ctx, va)
	if err != nil {
		return va, known, fencing.Decision{}, err
	}
	in, err := c.cachedInput(va, known)
	if err != nil {
		return va, known, fencing.Decision{}, err
	}
	in.Volume = volume
	decision := fencing.Decide(in)
	if decision.Action != fencing.ActionConfirm {
		return va, known, decision, nil
	}
	if in.Node, err = c.freshNode(ctx, va.Spec.NodeName); err != nil {
		return va, known, fencing.Decision{}, err
	}
	if fencing.NeedsFreshDriver(in.Node) {
		if in.Driver, err = c.freshDriver(ctx); err != nil {
			return va, known, fencing.Decision{}, err
		}
	}
	in.Fresh = true
	return va, known, fencing.Decide(in), nil
}

// cachedInput gathers fencing.Decide's inputs from the informer caches. A
// Node object that is gone is nil, which is itself a reason to fence; a
// blind attacher has no Node to look at.
func (c *Controller) cachedInput(va *storagev1.VolumeAttachment, known knownFence) (fencing.Input, error) {
	in := fencing.Input{Record: known.record, Intent: known.intent, DriverCanFence: c.cfg.Capabilities.Fence.UnpublishFence, Blind: c.cfg.Blind}
	if c.cfg.Blind {
		return in, nil
	}
	node, err := nodeutil.Lookup(c.nodeLister, va.Spec.NodeName)
	if err != nil {
		// The record is kept, for callers that go on without the Node.
		return in, err
	}
	in.Node, in.Driver = node, c.csiDriver()
	return in, nil
}

// recordAhead looks after the fence annotations of a VolumeAttachment that
// is not being deleted. A fence record or intent this process saw is
// written back at once, not only when a detach comes: whoever decides that
// detach (this process after a restart, another leader) must find it. And
// where a controller's intent already decided the detach fenced, the
// record that detach would write first is written now
// (fencing.RecordAhead), while the pods are still being deleted. Anything
// that keeps it from deciding leaves the record to the detach.
func (c *Controller) recordAhead(ctx context.Context, va *storagev1.VolumeAttachment) (*storagev1.VolumeAttachment, error) {
	if !c.track.hasFence(va) {
		return va, nil
	}
	va, known, err := c.restoreFences(ctx, va)
	if err != nil {
		return va, err
	}
	in := fencing.AheadInput{Deleting: va.DeletionTimestamp != nil, OurFinalizer: slices.Contains(va.Finalizers, c.finalizer), Intent: known.intent}
	if in.Intent == nil {
		return va, nil
	}
	decide, err := c.cachedInput(va, known)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Fence record left to the detach", "err", err)
		return va, nil
	}
	if in.Decision = fencing.Decide(decide); !fencing.RecordAhead(in) {
		return va, nil
	}
	nodeID, err := fencing.DetachNodeID(true, nil, known.intent, va.Annotations[names.NodeIDAnnotation], c.csiNodeID(va.Spec.NodeName))
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Fence record left to the detach", "err", err)
		return va, nil
	}
	return c.writeRecord(ctx, va, fencing.NewRecord(in.Decision.Reason, nodeID, time.Now()))
}

// writeRecord saves a fenced decision on the VolumeAttachment. Until the
// cache holds the returned version, syncs of this VolumeAttachment wait
// (tracker.supersede), so no retry can decide without the record.
func (c *Controller) writeRecord(ctx context.Context, va *storagev1.VolumeAttachment, rec fencing.Record) (*storagev1.VolumeAttachment, error) {
	out, err := c.writeFenceAnnotation(ctx, va, names.FenceRecordAnnotation, rec)
	if err != nil {
		return va, fmt.Errorf("record the fence decision before unpublishing: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Recorded fenced detach decision", "record", rec.Encode())
	return out, nil
}

// writeFenceAnnotation saves rec under key on the VolumeAttachment and
// remembers it for the life of the process.
func (c *Controller) writeFenceAnnotation(ctx context.Context, va *storagev1.VolumeAttachment, key string, rec fencing.Record) (*storagev1.VolumeAttachment, error) {
	out, err := c.writeFenceAnnotationRaw(ctx, va, key, rec.Encode())
	if err != nil {
		return va, err
	}
	c.track.remember(out)
	return out, nil
}

// finishDetach removes the finalizer after a successful unpublish, then
// reports it.
func (c *Controller) finishDetach(ctx context.Context, va *storagev1.VolumeAttachment, volumeID string, decision fencing.Decision) error {
	logger := klog.FromContext(ctx)
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil && decision.Action == fencing.ActionFenced {
		// Before the finalizer goes: the attach that replaces this one may
		// be queued by the event of that write, and must find the move.
		c.moves.moved(*pv, time.Now())
	}
	// Finalizer first: once it is gone the object may vanish, and a stale
	// cache can no longer lead to a second unpublish.
	clone := va.DeepCopy()
	clone.Finalizers = slices.DeleteFunc(clone.Finalizers, func(f string) bool { return f == c.finalizer })
	out, err := c.patchVA(ctx, va, clone, false)
	if err != nil {
		return fmt.Errorf("remove finalizer after successful unpublish: %w", err)
	}
	// The removal is never a no-op (the finalizer was there), so the cached
	// version is outdated whatever version the API answered with.
	c.track.markStale(va.Name, va.ResourceVersion)
	c.cfg.Metrics.Detached(string(decision.Action), string(decision.Reason), time.Since(va.DeletionTimestamp.Time))
	if decision.Action == fencing.ActionFenced {
		c.volumeEvent(va, v1.EventTypeNormal, EventFencedDetach, fmt.Sprintf("Detached volume %s from node %s with fencing (%s)", volumeID, va.Spec.NodeName, decision.Reason))
		if c.cfg.AfterFencedDetach != nil {
			c.cfg.AfterFencedDetach()
		}
	} else if c.cfg.AttachEvents {
		c.cfg.Recorder.Eventf(va, v1.EventTypeNormal, EventDetached, "Detached volume %s from node %s", volumeID, va.Spec.NodeName)
	}
	logger.V(2).Info("Detached")

	if len(out.Finalizers) == 0 {
		// The API server deletes the object now; there is no status left
		// to write.
		return nil
	}
	status := out.DeepCopy()
	status.Status.Attached = false
	status.Status.AttachmentMetadata = nil
	status.Status.DetachError = nil
	if _, err := c.patchVA(ctx, out, status, true); err != nil {
		// The detach is done and the finalizer gone; a stale status is
		// cosmetic and the object is on its way out.
		logger.Error(err, "Failed to mark VolumeAttachment detached")
	}
	return nil
}

// freshNode reads the Node from the API server, through the read client;
// nil when it is gone. The detaches of one node that confirm at the same
// time share a read that started after each of them asked (freshread): a
// burst of plain detaches from one node costs two reads, not one each.
func (c *Controller) freshNode(ctx context.Context, name string) (*v1.Node, error) {
	return c.nodeReads.Read(ctx, name, func(ctx context.Context) (*v1.Node, error) {
		node, err := c.cfg.ReadClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read node %q to confirm a plain detach: %w", name, err)
		}
		return node, nil
	})
}

// freshDriver reads the driver's CSIDriver from the API server; nil when the
// cluster has none. Shared as freshNode's reads are.
func (c *Controller) freshDriver(ctx context.Context) (*storagev1.CSIDriver, error) {
	return c.driverReads.Read(ctx, c.cfg.DriverName, func(ctx context.Context) (*storagev1.CSIDriver, error) {
		d, err := c.cfg.ReadClient.StorageV1().CSIDrivers().Get(ctx, c.cfg.DriverName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read CSIDriver %q to confirm a plain detach: %w", c.cfg.DriverName, err)
		}
		return d, nil
	})
}

// detachVolume finds the volume handle and unpublish secrets from the PV.
func (c *Controller) detachVolume(ctx context.Context, va *storagev1.VolumeAttachment) (string, map[string]string, error) {
	if va.Spec.Source.InlineVolumeSpec != nil && va.Spec.Source.InlineVolumeSpec.CSI != nil {
		c.logMigrationOnce(ctx, "va/"+va.Name, "VolumeAttachment has spec.source.inlineVolumeSpec (CSI migration of an in-tree volume)")
		return va.Spec.Source.InlineVolumeSpec.CSI.VolumeHandle, nil, nil
	}
	if va.Spec.Source.PersistentVolumeName == nil {
		return "", nil, fmt.Errorf("VolumeAttachment has neither persistentVolumeName nor a CSI inlineVolumeSpec")
	}
	pv, err := c.pvLister.Get(*va.Spec.Source.PersistentVolumeName)
	if err != nil {
		return "", nil, fmt.Errorf("get PV %s: %w", *va.Spec.Source.PersistentVolumeName, err)
	}
	if pv.Spec.CSI == nil {
		return "", nil, fmt.Errorf("PV %s is not a CSI volume", pv.Name)
	}
	secrets, err := c.publishSecrets(ctx, pv)
	if err != nil {
		return "", nil, err
	}
	return pv.Spec.CSI.VolumeHandle, secrets, nil
}

// detachFailed logs err, records it in status.detachError and emits a
// Warning Event with the given reason on the VolumeAttachment and its claim.
func (c *Controller) detachFailed(ctx context.Context, va *storagev1.VolumeAttachment, reason string, err error) {
	logger := klog.FromContext(ctx)
	logger.Error(err, "Detach failed")
	clone := va.DeepCopy()
	clone.Status.DetachError = volumeError(err, time.Now())
	if _, perr := c.patchVA(ctx, va, clone, true); perr != nil {
		logger.Error(perr, "Failed to save detachError")
	}
	c.volumeEvent(va, v1.EventTypeWarning, reason, err.Error())
}
