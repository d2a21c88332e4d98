// Package metrics defines the attacher's own Prometheus metrics, next to the
// csi_sidecar_operations_seconds histogram of csi-lib-utils, on the same
// registry and therefore the same /metrics endpoint.
package metrics

import (
	"time"

	k8smetrics "k8s.io/component-base/metrics"
)

const subsystem = "fenceline_attacher"

// Result label values.
const (
	// ResultSuccess labels a detach whose ControllerUnpublishVolume succeeded.
	ResultSuccess = "success"
	// ResultError labels a detach attempt that failed and will be retried.
	ResultError = "error"
	// ResultRefused labels a detach that needed a fence the driver cannot
	// give: no ControllerUnpublishVolume was sent, and it is retried.
	ResultRefused = "refused"
)

// Recorder records detach outcomes. A nil *Recorder records nothing, so
// tests and callers without metrics need no special casing.
type Recorder struct {
	detaches       *k8smetrics.CounterVec
	detachDuration *k8smetrics.HistogramVec
	restored       *k8smetrics.CounterVec
	held           *k8smetrics.Counter
}

// New creates the metrics and registers them with registry (typically the
// csi-lib-utils metrics manager's GetRegistry()).
func New(registry k8smetrics.KubeRegistry) *Recorder {
	r := &Recorder{
		detaches: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "detaches_total",
			Help:           "ControllerUnpublishVolume attempts for deleted VolumeAttachments by mode (fenced or plain), fence reason and result.",
			StabilityLevel: k8smetrics.ALPHA,
		}, []string{"mode", "reason", "result"}),
		detachDuration: k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{
			Subsystem:      subsystem,
			Name:           "detach_duration_seconds",
			Help:           "Time from a VolumeAttachment's deletionTimestamp to the removal of the attacher's finalizer, by mode and fence reason.",
			Buckets:        []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
			StabilityLevel: k8smetrics.ALPHA,
		}, []string{"mode", "reason"}),
		restored: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "fence_annotations_restored_total",
			Help:           "Fence records and intents that someone removed from a VolumeAttachment and the attacher wrote back, by annotation.",
			StabilityLevel: k8smetrics.ALPHA,
		}, []string{"annotation"}),
		held: k8smetrics.NewCounter(&k8smetrics.CounterOpts{
			Subsystem:      subsystem,
			Name:           "attaches_held_total",
			Help:           "ControllerPublishVolume attempts held because another node's detach of the same single-node volume had not finished.",
			StabilityLevel: k8smetrics.ALPHA,
		}),
	}
	registry.MustRegister(r.detaches, r.detachDuration, r.restored, r.held)
	return r
}

// Restored records a fence annotation written back after someone removed it.
func (r *Recorder) Restored(annotation string) {
	if r == nil {
		return
	}
	r.restored.WithLabelValues(annotation).Inc()
}

// Held records an attach held for another node's pending detach.
func (r *Recorder) Held() {
	if r == nil {
		return
	}
	r.held.Inc()
}

// Detach records one ControllerUnpublishVolume attempt. reason is empty for
// a plain detach without a fence reason and is reported as "none".
func (r *Recorder) Detach(mode, reason, result string) {
	if r == nil {
		return
	}
	r.detaches.WithLabelValues(mode, reasonLabel(reason), result).Inc()
}

// Detached records the time a VolumeAttachment spent being deleted until the
// finalizer was removed.
func (r *Recorder) Detached(mode, reason string, since time.Duration) {
	if r == nil {
		return
	}
	r.detachDuration.WithLabelValues(mode, reasonLabel(reason)).Observe(since.Seconds())
}

func reasonLabel(reason string) string {
	if reason == "" {
		return "none"
	}
	return reason
}
