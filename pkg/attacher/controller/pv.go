package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// syncPV removes our finalizer from a PersistentVolume that is being
// deleted once no VolumeAttachment of this driver references it. The check
// uses the informer's PV index, not a List.
func (c *Controller) syncPV(ctx context.Context, name string) error {
	pv, err := c.pvLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get PV %s from cache: %w", name, err)
	}
	if pv.DeletionTimestamp == nil || !slices.Contains(pv.Finalizers, c.finalizer) {
		return nil
	}
	if vas := c.vasByIndex(vaByPVIndex, name); len(vas) > 0 {
		// vaDeleted re-queues the PV when the last one goes.
		klog.FromContext(ctx).V(4).Info("PV still in use by VolumeAttachments", "pv", name, "count", len(vas))
		return nil
	}
	clone := pv.DeepCopy()
	clone.Finalizers = slices.DeleteFunc(clone.Finalizers, func(f string) bool { return f == c.finalizer })
	if _, err := c.patchPV(ctx, pv, clone); err != nil {
		return fmt.Errorf("remove finalizer from deleted PV: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Removed finalizer from deleted PV", "pv", name)
	return nil
}
