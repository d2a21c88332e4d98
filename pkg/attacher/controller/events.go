package controller

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// volumeEvent records an Event on the VolumeAttachment and the same Event
// (type, reason and message) on the PersistentVolumeClaim bound to its PV.
// Users look at their claim (`kubectl describe pvc`), not at cluster-scoped
// VolumeAttachments, whose Events land in the default namespace where few
// would think to look.
func (c *Controller) volumeEvent(va *storagev1.VolumeAttachment, eventtype, reason, message string) {
	c.cfg.Recorder.Event(va, eventtype, reason, message)
	if claim := c.claimOf(va); claim != nil {
		c.cfg.Recorder.Event(claim, eventtype, reason, message)
	}
}

// claimOf returns a reference to the claim bound to the VolumeAttachment's
// PV, taken from the cached PV's spec.claimRef so that an Event costs no API
// read. It is nil for an inline volume, a PV missing from the cache, a PV
// without a claim (a static PV nobody claimed) and a Released PV, whose
// claim is gone.
func (c *Controller) claimOf(va *storagev1.VolumeAttachment) *v1.ObjectReference {
	if va.Spec.Source.PersistentVolumeName == nil {
		return nil
	}
	pv, err := c.pvLister.Get(*va.Spec.Source.PersistentVolumeName)
	if err != nil {
		return nil
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Name == "" || ref.Namespace == "" || pv.Status.Phase == v1.VolumeReleased {
		return nil
	}
	// A fresh reference: a claimRef written by hand (pre-binding) may lack
	// kind and apiVersion, which an Event's involvedObject needs.
	return &v1.ObjectReference{
		Kind:       "PersistentVolumeClaim",
		APIVersion: "v1",
		Namespace:  ref.Namespace,
		Name:       ref.Name,
		UID:        ref.UID,
	}
}
