package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// patchVA writes the difference between oldVA and newVA as a strategic
// merge patch (to the status subresource when status is true), so that
// concurrent writers of other fields or other finalizers are not overwritten.
// Callers whose write will come back as an update event that re-queues the
// item mark the old version superseded (see tracker.superseded).
func (c *Controller) patchVA(ctx context.Context, oldVA, newVA *storagev1.VolumeAttachment, status bool) (*storagev1.VolumeAttachment, error) {
	return c.patchVAWith(ctx, c.client(ctx), oldVA, newVA, status)
}

// patchVAWith is patchVA through the given client.
func (c *Controller) patchVAWith(ctx context.Context, client kubernetes.Interface, oldVA, newVA *storagev1.VolumeAttachment, status bool) (*storagev1.VolumeAttachment, error) {
	patch, err := twoWayPatch(oldVA, newVA, storagev1.VolumeAttachment{})
	if err != nil {
		return nil, fmt.Errorf("VolumeAttachment %s: %w", oldVA.Name, err)
	}
	var sub []string
	if status {
		sub = []string{"status"}
	}
	out, err := client.StorageV1().VolumeAttachments().Patch(ctx, oldVA.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, sub...)
	if err != nil {
		return nil, fmt.Errorf("patch VolumeAttachment %s: %w", oldVA.Name, err)
	}
	return out, nil
}

// patchPV writes the difference between oldPV and newPV and returns the PV
// as the API server stored it.
func (c *Controller) patchPV(ctx context.Context, oldPV, newPV *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	patch, err := twoWayPatch(oldPV, newPV, v1.PersistentVolume{})
	if err != nil {
		return nil, fmt.Errorf("PersistentVolume %s: %w", oldPV.Name, err)
	}
	out, err := c.client(ctx).CoreV1().PersistentVolumes().Patch(ctx, oldPV.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch PersistentVolume %s: %w", oldPV.Name, err)
	}
	return out, nil
}

func twoWayPatch(oldObj, newObj, schema any) ([]byte, error) {
	o, err := json.Marshal(oldObj)
	if err != nil {
		return nil, fmt.Errorf("marshal old object: %w", err)
	}
	n, err := json.Marshal(newObj)
	if err != nil {
		return nil, fmt.Errorf("marshal new object: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(o, n, schema)
	if err != nil {
		return nil, fmt.Errorf("create merge patch: %w", err)
	}
	return patch, nil
}

// volumeError builds the status error of a failed CSI call, carrying the
// gRPC code as errorCode like upstream.
func volumeError(err error, now time.Time) *storagev1.VolumeError {
	ve := &storagev1.VolumeError{Message: err.Error(), Time: metav1.NewTime(now)}
	if s, ok := status.FromError(err); ok {
		ve.ErrorCode = ptr.To(int32(s.Code()))
	}
	return ve
}
