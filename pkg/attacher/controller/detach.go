package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// needsDetach states when a VolumeAttachment may be detached at all: it
// belongs to this driver, it is being deleted, and it still carries our
// finalizer (without it there was no ControllerPublishVolume of ours, or the
// detach already succeeded). The finalizer itself is only ever removed after
// a successful ControllerUnpublishVolume.
func needsDetach(va *storagev1.VolumeAttachment, driver, finalizer string) bool {
	return va != nil && va.Spec.Attacher == driver && va.DeletionTimestamp != nil && slices.Contains(va.Finalizers, finalizer)
}

// syncDetach runs ControllerUnpublishVolume, fenced when fencing.Decide says
// so, then removes the finalizer before touching status, as upstream does,
// so that a second sync cannot unpublish twice.
func (c *Controller) syncDetach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	if !needsDetach(va, c.cfg.DriverName, c.finalizer) {
		return nil
	}
	logger := klog.FromContext(ctx)
	volumeID, secrets, err := c.detachVolume(ctx, va)
	if err != nil {
		c.detachFailed(ctx, va, err)
		return err
	}
	nodeID, err := c.nodeID(va)
	if err != nil {
		c.detachFailed(ctx, va, err)
		return err
	}
	// A Node object that is gone is nil here: a plain detach, as upstream.
	node, err := nodeutil.Lookup(c.nodeLister, va.Spec.NodeName)
	if err != nil {
		c.detachFailed(ctx, va, err)
		return err
	}

	decision := fencing.Decide(fencing.Input{
		Node:           node,
		Driver:         c.csiDriver(),
		DriverCanFence: c.cfg.Capabilities.Fence.UnpublishFence,
	})
	if decision.Unsupported && c.track.firstUnsupportedWarning(va.UID) {
		c.cfg.Recorder.Eventf(va, v1.EventTypeWarning, EventFenceUnsupported,
			"Node %s is cut off (%s) but driver %s does not advertise UNPUBLISH_FENCE; detaching without fencing", va.Spec.NodeName, decision.Reason, c.cfg.DriverName)
	}
	fenced := decision.Mode == fencing.ModeFenced
	logger = logger.WithValues("volumeID", volumeID, "nodeID", nodeID, "mode", decision.Mode, "reason", decision.Reason)

	callCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	err = c.cfg.CSI.Unpublish(callCtx, volumeID, nodeID, secrets, fenced)
	cancel()
	if err != nil {
		c.cfg.Metrics.Detach(string(decision.Mode), string(decision.Reason), metrics.ResultError)
		err = fmt.Errorf("ControllerUnpublishVolume (%s) of %s from node %s: %w", decision.Mode, volumeID, nodeID, err)
		c.detachFailed(ctx, va, err)
		return err
	}
	c.cfg.Metrics.Detach(string(decision.Mode), string(decision.Reason), metrics.ResultSuccess)

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
	c.cfg.Metrics.Detached(string(decision.Mode), string(decision.Reason), time.Since(va.DeletionTimestamp.Time))
	if fenced {
		c.cfg.Recorder.Eventf(va, v1.EventTypeNormal, EventFencedDetach, "Detached volume %s from node %s with fencing (%s)", volumeID, va.Spec.NodeName, decision.Reason)
	} else {
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
// DetachFailed Event.
func (c *Controller) detachFailed(ctx context.Context, va *storagev1.VolumeAttachment, err error) {
	logger := klog.FromContext(ctx)
	logger.Error(err, "Detach failed")
	clone := va.DeepCopy()
	clone.Status.DetachError = volumeError(err, time.Now())
	if _, perr := c.patchVA(ctx, va, clone, true); perr != nil {
		logger.Error(perr, "Failed to save detachError")
	}
	c.cfg.Recorder.Event(va, v1.EventTypeWarning, EventDetachFailed, err.Error())
}
