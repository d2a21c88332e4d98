package controller

import (
	"time"

	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/cutoff"
)

// PendingDetaches implements metrics.State: this driver's VolumeAttachments
// that are being deleted and still carry the finalizer, each with the mode
// and reason fencing.Decide gives from the caches now (a recorded fence
// first). It reads the informer cache once per scrape; on a replica that
// does not lead, the cache is empty and so is the list.
func (c *Controller) PendingDetaches() []metrics.PendingDetach {
	vas, err := c.vaLister.List(everything)
	if err != nil {
		klog.Background().Error(err, "List VolumeAttachments from cache for metrics")
		return nil
	}
	var out []metrics.PendingDetach
	for _, va := range vas {
		if !needsDetach(va, c.cfg.DriverName, c.finalizer) {
			continue
		}
		var known knownFence
		known.record, _ = fencing.RecordOf(va)
		known.intent, _ = cutoff.IntentOf(va)
		in, _ := c.cachedInput(va, known)
		// Fresh stands for "as the cache says": a gauge does not confirm.
		in.Fresh = true
		d := fencing.Decide(in)
		out = append(out, metrics.PendingDetach{Mode: string(d.Action), Reason: string(d.Reason), Since: va.DeletionTimestamp.Time})
	}
	return out
}

// Blind implements metrics.State.
func (c *Controller) Blind() bool { return c.cfg.Blind }

// FenceCapabilities implements metrics.State.
func (c *Controller) FenceCapabilities() map[string]bool {
	return map[string]bool{
		"UNPUBLISH_FENCE": c.cfg.Capabilities.Fence.UnpublishFence,
		"FORCE_UNPUBLISH": c.cfg.Capabilities.Fence.ForceUnpublish,
	}
}

// QueueWaits implements metrics.State: the oldest wait in each queue.
func (c *Controller) QueueWaits() map[string]time.Duration {
	out := map[string]time.Duration{c.pvQueue.Name(): c.pvQueue.OldestWait()}
	for _, l := range c.vaQueue.loops {
		out[l.Name()] = l.OldestWait()
	}
	return out
}
