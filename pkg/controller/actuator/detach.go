package actuator

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// EventDetachStarted (Normal, on the VolumeAttachment): Fenceline deleted
// the VolumeAttachment, so that its attacher detaches it.
const EventDetachStarted = "FencelineDetachStarted"

// VACheck is a controller's decision about a VolumeAttachment, made again
// on data read fresh right before the write: whether the write may go
// ahead, and why (or why not).
type VACheck func(ctx context.Context, va *storagev1.VolumeAttachment) (ok bool, why string, err error)

// DeleteVolumeAttachment starts the detach of va by deleting it, as the
// attach/detach controller does: its attacher then unpublishes the volume
// and removes its finalizer. check runs first on a fresh read of va (and
// whatever else it reads fresh); the fence intent (the caller's, recorded
// before this call) is on the object by then. The delete carries va's UID
// as a precondition, so a VolumeAttachment recreated under the same name
// is never deleted. One that is gone counts as success.
func (a *Actuator) DeleteVolumeAttachment(ctx context.Context, va *storagev1.VolumeAttachment, why string, check VACheck) error {
	logger := klog.FromContext(ctx).WithValues("volumeAttachment", klog.KObj(va))
	fresh, err := a.Client.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading VolumeAttachment %s before its delete: %w", va.Name, err)
	case fresh.UID != va.UID:
		return nil // another VolumeAttachment under the name: a new decision
	}
	ok, freshWhy, err := check(ctx, fresh)
	if err != nil {
		return fmt.Errorf("re-checking the delete of VolumeAttachment %s: %w", va.Name, err)
	}
	if !ok {
		changed := &DecisionChangedError{What: "delete VolumeAttachment " + va.Name, Why: freshWhy}
		a.decisionChanged(ctx, fresh, changed)
		return changed
	}
	if a.DryRun {
		logger.Info("Dry run: would delete VolumeAttachment", "why", why)
		a.Recorder.Eventf(fresh, v1.EventTypeNormal, EventDetachStarted, "Dry run: would delete the VolumeAttachment: %s", why)
		return nil
	}
	err = a.Client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &fresh.UID}})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone, or replaced: nothing of ours left to delete
	case err != nil:
		return fmt.Errorf("deleting VolumeAttachment %s: %w", va.Name, err)
	}
	logger.Info("Deleted VolumeAttachment to detach it", "why", why)
	a.Recorder.Eventf(fresh, v1.EventTypeNormal, EventDetachStarted, "Deleted the VolumeAttachment so that its attacher detaches it: %s", why)
	return nil
}
