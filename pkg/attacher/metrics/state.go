package metrics

import (
	"time"

	k8smetrics "k8s.io/component-base/metrics"
)

// PendingDetach is one VolumeAttachment being deleted whose detach has not
// succeeded yet.
type PendingDetach struct {
	// Mode is how it is (or would now be) detached: fenced, plain or refused.
	Mode string
	// Reason is the fence reason, "" for none.
	Reason string
	// Since is the VolumeAttachment's deletionTimestamp.
	Since time.Time
}

// State reports, at scrape time, what the attacher knows now.
type State interface {
	// PendingDetaches lists the VolumeAttachments waiting for a detach.
	PendingDetaches() []PendingDetach
	// FenceCapabilities maps each fence capability to whether the driver
	// advertised it at start-up.
	FenceCapabilities() map[string]bool
	// Blind is true when the attacher may not read Nodes or CSIDrivers and
	// so never fences a detach it has not recorded as fenced already.
	Blind() bool
	// QueueWaits maps each work queue's name to how long the key that has
	// waited longest for a worker has waited (0 when none waits).
	QueueWaits() map[string]time.Duration
}

var (
	pendingDesc = k8smetrics.NewDesc(subsystem+"_pending_detaches",
		"VolumeAttachments being deleted and not yet detached, by mode and fence reason.",
		[]string{"mode", "reason"}, nil, k8smetrics.ALPHA, "")
	oldestDesc = k8smetrics.NewDesc(subsystem+"_oldest_pending_detach_seconds",
		"Age of the oldest VolumeAttachment being deleted and not yet detached (since its deletionTimestamp), by mode and fence reason.",
		[]string{"mode", "reason"}, nil, k8smetrics.ALPHA, "")
	capabilityDesc = k8smetrics.NewDesc(subsystem+"_driver_fence_capability",
		"1 when the CSI driver advertised the fence capability at start-up, 0 otherwise.",
		[]string{"capability"}, nil, k8smetrics.ALPHA, "")
	queueWaitDesc = k8smetrics.NewDesc(subsystem+"_queue_oldest_wait_seconds",
		"How long the item that has waited longest for a worker in each queue has waited; 0 when none waits. Queue depths are workqueue_depth{name}.",
		[]string{"queue"}, nil, k8smetrics.ALPHA, "")
	blindDesc = k8smetrics.NewDesc(subsystem+"_blind",
		"1 when RBAC does not let the attacher read Nodes or CSIDrivers, so that it detaches as the upstream attacher does and never fences; 0 otherwise.",
		nil, nil, k8smetrics.ALPHA, "")
)

// stateCollector turns State into gauges at scrape time: nothing to keep in
// sync with events, and a scrape costs one pass over the informer cache.
type stateCollector struct {
	k8smetrics.BaseStableCollector
	state State
	now   func() time.Time
}

// RegisterState registers the pending-detach and fence-capability gauges.
func RegisterState(registry k8smetrics.KubeRegistry, s State) {
	registry.CustomMustRegister(&stateCollector{state: s, now: time.Now})
}

// DescribeWithStability implements k8smetrics.StableCollector.
func (c *stateCollector) DescribeWithStability(ch chan<- *k8smetrics.Desc) {
	ch <- pendingDesc
	ch <- oldestDesc
	ch <- capabilityDesc
	ch <- blindDesc
	ch <- queueWaitDesc
}

// CollectWithStability implements k8smetrics.StableCollector.
func (c *stateCollector) CollectWithStability(ch chan<- k8smetrics.Metric) {
	type key struct{ mode, reason string }
	count := map[key]int{}
	oldest := map[key]time.Time{}
	for _, p := range c.state.PendingDetaches() {
		k := key{p.Mode, reasonLabel(p.Reason)}
		count[k]++
		if o, ok := oldest[k]; !ok || p.Since.Before(o) {
			oldest[k] = p.Since
		}
	}
	now := c.now()
	for k, n := range count {
		ch <- k8smetrics.NewLazyConstMetric(pendingDesc, k8smetrics.GaugeValue, float64(n), k.mode, k.reason)
		ch <- k8smetrics.NewLazyConstMetric(oldestDesc, k8smetrics.GaugeValue, now.Sub(oldest[k]).Seconds(), k.mode, k.reason)
	}
	for capability, on := range c.state.FenceCapabilities() {
		v := 0.0
		if on {
			v = 1
		}
		ch <- k8smetrics.NewLazyConstMetric(capabilityDesc, k8smetrics.GaugeValue, v, capability)
	}
	blind := 0.0
	if c.state.Blind() {
		blind = 1
	}
	ch <- k8smetrics.NewLazyConstMetric(blindDesc, k8smetrics.GaugeValue, blind)
	for queue, wait := range c.state.QueueWaits() {
		ch <- k8smetrics.NewLazyConstMetric(queueWaitDesc, k8smetrics.GaugeValue, wait.Seconds(), queue)
	}
}
