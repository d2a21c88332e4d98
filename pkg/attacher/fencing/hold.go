package fencing

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// PublishHold states when ControllerPublishVolume of a volume to a node must
// wait: the volume can be written by one node only (its PersistentVolume
// allows neither ReadWriteMany nor ReadOnlyMany) and another
// VolumeAttachment of the same PersistentVolume, on another node, is being
// deleted and still carries this attacher's finalizer: its detach has not
// finished, and it is, or may have to be, fenced. Publishing before it
// finished would let two nodes reach the volume; an array that refuses a
// second attachment stops that, but a driver that does not return
// FAILED_PRECONDITION would attach twice. The upstream external-attacher
// does not wait: a deliberate difference.
//
// others are the PersistentVolume's other VolumeAttachments; finalizer is
// this attacher's. why names the attachments waited for.
func PublishHold(pv *v1.PersistentVolume, node, finalizer string, others []*storagev1.VolumeAttachment) (hold bool, why string) {
	if pv == nil || slices.Contains(pv.Spec.AccessModes, v1.ReadWriteMany) || slices.Contains(pv.Spec.AccessModes, v1.ReadOnlyMany) {
		return false, ""
	}
	var pending []string
	for _, va := range others {
		if va == nil || va.Spec.NodeName == node || va.DeletionTimestamp == nil || !slices.Contains(va.Finalizers, finalizer) {
			continue
		}
		pending = append(pending, fmt.Sprintf("%s (node %s)", va.Name, va.Spec.NodeName))
	}
	if len(pending) == 0 {
		return false, ""
	}
	slices.Sort(pending)
	return true, fmt.Sprintf("volume %s can be written by one node only and its detach from another node has not finished: VolumeAttachment %s; the attach waits for that detach (fenced if the node may still write) so that two nodes never reach the volume",
		pv.Name, strings.Join(pending, ", "))
}
