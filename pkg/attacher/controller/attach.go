package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/csiclient"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/names"
)

// Event reasons emitted on VolumeAttachments (upstream emits none).
const (
	// EventAttached (Normal): ControllerPublishVolume succeeded; recorded
	// only with Config.AttachEvents.
	EventAttached = "Attached"
	// EventDetached (Normal): a plain unpublish succeeded; recorded only
	// with Config.AttachEvents.
	EventDetached = "Detached"
	// EventFencedDetach (Normal): a fenced unpublish succeeded.
	EventFencedDetach = "FencedDetach"
	// EventAttachFailed (Warning): attaching failed; it is retried unless
	// the error is permanent.
	EventAttachFailed = "AttachFailed"
	// EventDetachFailed (Warning): unpublishing failed; the finalizer stays
	// and it is retried.
	EventDetachFailed = "DetachFailed"
	// EventFenceUnsupported (Warning): the node is cut off but the driver
	// cannot fence, so the detach is plain. Once per VolumeAttachment.
	EventFenceUnsupported = "FenceUnsupported"
	// EventFenceRequired (Warning): the detach needs a fence the driver
	// cannot give (safe-detach, or a recorded fence), so nothing is
	// unpublished; the finalizer stays and it is retried.
	EventFenceRequired = "FenceRequired"
	// EventAttachHeld (Warning): a single-node volume's detach from another
	// node has not finished (fencing.PublishHold), so the attach waits; it
	// is retried when that detach finishes.
	EventAttachHeld = "AttachHeld"
)

var everything = labels.Everything()

// errPermanent marks attach errors that retrying cannot fix; they are
// recorded in status.attachError and not retried until the object changes.
// Match it with errors.Is; it never shows in a message (see permanent).
var errPermanent = errors.New("permanent error")

// permanentError is an error that retrying cannot fix: it reads as the
// error it wraps, with nothing added, so that a user sees only the cause.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Is makes errors.Is(err, errPermanent) true.
func (permanentError) Is(target error) bool { return target == errPermanent }

// permanent returns a permanentError of the formatted message.
func permanent(format string, a ...any) error {
	return permanentError{fmt.Errorf(format, a...)}
}

// syncVA is the one sync per VolumeAttachment name.
func (c *Controller) syncVA(ctx context.Context, name string) error {
	va, err := c.vaLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get VolumeAttachment %s from cache: %w", name, err)
	}
	if !c.ours(va) || c.track.isStale(va) {
		return nil
	}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumeAttachment", klog.KObj(va), "node", va.Spec.NodeName))
	if va.DeletionTimestamp == nil {
		if va, err = c.recordAhead(ctx, va); err != nil {
			return err
		}
		return c.syncAttach(ctx, va)
	}
	return c.syncDetach(ctx, va)
}

// syncAttach makes an undeleted VolumeAttachment attached: PV finalizer,
// VA finalizer + node-id annotation (one write), ControllerPublishVolume,
// status (one write).
func (c *Controller) syncAttach(ctx context.Context, va *storagev1.VolumeAttachment) error {
	logger := klog.FromContext(ctx)
	force := c.track.isForceAttach(va.Name)
	if va.Status.Attached && !force {
		return nil
	}
	if !c.cfg.Capabilities.NeedsAttach() {
		return c.markAttachedTrivially(ctx, va)
	}

	req, err := c.prepareAttach(ctx, va)
	if err != nil {
		c.attachFailed(ctx, va, err)
		if errors.Is(err, errPermanent) {
			return nil
		}
		return err
	}
	if !slices.Contains(va.Finalizers, c.finalizer) || va.Annotations[names.NodeIDAnnotation] != req.NodeID {
		clone := va.DeepCopy()
		if !slices.Contains(clone.Finalizers, c.finalizer) {
			clone.Finalizers = append(clone.Finalizers, c.finalizer)
		}
		if clone.Annotations == nil {
			clone.Annotations = map[string]string{}
		}
		clone.Annotations[names.NodeIDAnnotation] = req.NodeID
		out, err := c.patchVA(ctx, va, clone, false)
		if err != nil {
			return fmt.Errorf("add finalizer and node ID: %w", err)
		}
		c.track.supersede(va.Name, va.ResourceVersion, out.ResourceVersion)
		va = out
	}

	if err := c.holdPublish(ctx, va); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	publishContext, err := c.cfg.CSI.Publish(callCtx, req)
	cancel()
	if err != nil {
		err = fmt.Errorf("ControllerPublishVolume of %s to node %s: %w", req.VolumeID, req.NodeID, err)
		c.attachFailed(ctx, va, err)
		return err
	}
	clone := va.DeepCopy()
	clone.Status.Attached = true
	clone.Status.AttachmentMetadata = publishContext
	clone.Status.AttachError = nil
	out, err := c.patchVA(ctx, withAnyAttachError(va), clone, true)
	if err != nil {
		return fmt.Errorf("save attached status: %w", err)
	}
	c.track.supersede(va.Name, va.ResourceVersion, out.ResourceVersion)
	c.track.setForceAttach(va.Name, false)
	if c.cfg.AttachEvents {
		c.cfg.Recorder.Eventf(va, v1.EventTypeNormal, EventAttached, "Attached volume %s to node %s", req.VolumeID, va.Spec.NodeName)
	}
	logger.V(2).Info("Attached", "volumeID", req.VolumeID, "nodeID", req.NodeID)
	return nil
}

// holdPublish returns an error, recorded in status.attachError with an
// AttachHeld Event, while fencing.PublishHold says the publish must wait for
// another node's detach. It is checked right before ControllerPublishVolume.
// The cache can only err on the safe side here: a detach it still shows
// pending holds a little longer, and the deletion of the other attachment
// reaches the cache before this one's creation (the attach/detach
// controller deletes before it creates, and one watch delivers both in
// order).
func (c *Controller) holdPublish(ctx context.Context, va *storagev1.VolumeAttachment) error {
	pvName := va.Spec.Source.PersistentVolumeName
	if pvName == nil {
		return nil
	}
	pv, err := c.pvLister.Get(*pvName)
	if err != nil {
		return fmt.Errorf("get PV %s: %w", *pvName, err)
	}
	hold, why := fencing.PublishHold(pv, va.Spec.NodeName, c.finalizer, c.vasByIndex(vaByPVIndex, *pvName))
	if !hold {
		return nil
	}
	err = errors.New("ControllerPublishVolume held: " + why)
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Attach held", "why", why)
	c.cfg.Metrics.Held()
	clone := va.DeepCopy()
	clone.Status.AttachError = volumeError(err, time.Now())
	if _, perr := c.patchVA(ctx, va, clone, true); perr != nil {
		logger.Error(perr, "Failed to save attachError")
	}
	c.volumeEvent(va, v1.EventTypeWarning, EventAttachHeld, err.Error())
	return err
}

// markAttachedTrivially is upstream's trivial path for a driver without
// PUBLISH_UNPUBLISH_VOLUME: nothing to publish, no finalizer.
func (c *Controller) markAttachedTrivially(ctx context.Context, va *storagev1.VolumeAttachment) error {
	clone := va.DeepCopy()
	clone.Status.Attached = true
	clone.Status.AttachError = nil
	out, err := c.patchVA(ctx, withAnyAttachError(va), clone, true)
	if err != nil {
		return err
	}
	c.track.supersede(va.Name, va.ResourceVersion, out.ResourceVersion)
	klog.FromContext(ctx).V(2).Info("Marked attached without ControllerPublishVolume (driver has no PUBLISH_UNPUBLISH_VOLUME)")
	return nil
}

// prepareAttach checks the PV (attachablePV), adds the PV finalizer and
// collects everything ControllerPublishVolume needs, in upstream's order:
// a PV that can be attached gets its finalizer before the node ID, access
// mode and secrets are looked up. Errors wrapping errPermanent cannot be
// fixed by retrying.
func (c *Controller) prepareAttach(ctx context.Context, va *storagev1.VolumeAttachment) (csiclient.PublishRequest, error) {
	var req csiclient.PublishRequest
	pv, err := c.attachPV(ctx, va)
	if err != nil {
		return req, err
	}
	nodeID, err := attachNodeID(c.csiNode(va.Spec.NodeName), va.Spec.NodeName, c.cfg.DriverName)
	if err != nil {
		return req, err
	}
	capability, err := volumeCapability(pv, c.cfg.DefaultFSType, c.cfg.Capabilities.SingleNodeMultiWriter)
	if err != nil {
		return req, permanentError{err}
	}
	secrets, err := c.publishSecrets(ctx, pv)
	if err != nil {
		return req, err
	}
	return csiclient.PublishRequest{
		VolumeID:      pv.Spec.CSI.VolumeHandle,
		NodeID:        nodeID,
		Capability:    capability,
		ReadOnly:      publishReadOnly(pv, c.cfg.Capabilities.PublishReadOnly),
		Secrets:       secrets,
		VolumeContext: pv.Spec.CSI.VolumeAttributes,
	}, nil
}

// attachPV returns the VolumeAttachment's PV once attachablePV allows it and
// it carries our finalizer. When the finalizer is added, the PV the API
// returns is checked again, so a deletion that the cache has not seen yet
// still stops the attach.
func (c *Controller) attachPV(ctx context.Context, va *storagev1.VolumeAttachment) (*v1.PersistentVolume, error) {
	if va.Spec.Source.InlineVolumeSpec != nil {
		c.logMigrationOnce(ctx, "va/"+va.Name, "VolumeAttachment has spec.source.inlineVolumeSpec (CSI migration of an in-tree volume)")
		return nil, permanent("inline volumes from CSI migration are not supported by fenceline-attacher")
	}
	if va.Spec.Source.PersistentVolumeName == nil {
		return nil, permanent("VolumeAttachment has no spec.source.persistentVolumeName")
	}
	pvName := *va.Spec.Source.PersistentVolumeName
	pv, err := c.pvLister.Get(pvName)
	if err != nil {
		return nil, fmt.Errorf("get PV %s: %w", pvName, err)
	}
	if pv.Spec.CSI == nil {
		c.logMigrationOnce(ctx, "pv/"+pv.Name, "PersistentVolume is an in-tree volume (CSI migration)")
	}
	if err := attachablePV(pv, c.cfg.DriverName); err != nil {
		return nil, err
	}
	if slices.Contains(pv.Finalizers, c.finalizer) {
		return pv, nil
	}
	clone := pv.DeepCopy()
	clone.Finalizers = append(clone.Finalizers, c.finalizer)
	out, err := c.patchPV(ctx, pv, clone)
	if err != nil {
		return nil, fmt.Errorf("add finalizer to PV: %w", err)
	}
	if err := attachablePV(out, c.cfg.DriverName); err != nil {
		return nil, err
	}
	return out, nil
}

// withAnyAttachError returns va with a placeholder attachError when it has
// none, as the base of the patch that marks it attached: the patch then
// always clears status.attachError. The cached va may not show an
// attachError this attacher wrote a moment ago (its own error writes are
// not waited for, and a PV or CSINode event re-queues the VA at once), and
// a patch computed from it alone would leave that error next to
// attached=true.
func withAnyAttachError(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
	if va.Status.AttachError != nil {
		return va
	}
	base := va.DeepCopy()
	base.Status.AttachError = &storagev1.VolumeError{Message: "any"}
	return base
}

// attachFailed logs err, records it in status.attachError and emits an
// AttachFailed Event.
func (c *Controller) attachFailed(ctx context.Context, va *storagev1.VolumeAttachment, err error) {
	logger := klog.FromContext(ctx)
	logger.Error(err, "Attach failed")
	clone := va.DeepCopy()
	clone.Status.AttachError = volumeError(err, time.Now())
	if _, perr := c.patchVA(ctx, va, clone, true); perr != nil {
		logger.Error(perr, "Failed to save attachError")
	}
	c.cfg.Recorder.Event(va, v1.EventTypeWarning, EventAttachFailed, err.Error())
}

func (c *Controller) logMigrationOnce(ctx context.Context, key, what string) {
	if c.track.firstMigrationLog(key) {
		klog.FromContext(ctx).Info("CSI migration is out of scope for fenceline-attacher; use the upstream external-attacher for migrated in-tree volumes", "object", key, "detail", what)
	}
}
