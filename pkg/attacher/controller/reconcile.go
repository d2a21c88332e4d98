package controller

import (
	"context"
	"slices"

	"k8s.io/klog/v2"
)

// reconcile compares what the driver reports as published (ListVolumes with
// published_node_ids) with VolumeAttachments marked attached, and re-queues
// attachments the driver has lost for a forced ControllerPublishVolume, as
// upstream's --reconcile-sync does. It runs every ReconcileSync, so a List
// from the cache is acceptable here.
func (c *Controller) reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("reconciler")
	published, err := c.cfg.CSI.PublishedNodes(ctx, c.cfg.MaxEntries)
	if err != nil {
		logger.Error(err, "ListVolumes failed; skipping this reconcile round")
		return
	}
	vas, err := c.vaLister.List(everything)
	if err != nil {
		logger.Error(err, "List VolumeAttachments from cache")
		return
	}
	for _, va := range vas {
		if !c.ours(va) || !va.Status.Attached || va.DeletionTimestamp != nil || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := c.pvLister.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil {
			continue
		}
		nodeID, err := c.nodeID(va)
		if err != nil {
			continue
		}
		if slices.Contains(published[pv.Spec.CSI.VolumeHandle], nodeID) {
			continue
		}
		logger.Info("Driver does not report the volume as published; re-attaching", "volumeAttachment", va.Name, "volumeID", pv.Spec.CSI.VolumeHandle, "nodeID", nodeID)
		c.track.setForceAttach(va.Name, true)
		c.enqueue(va)
	}
}
