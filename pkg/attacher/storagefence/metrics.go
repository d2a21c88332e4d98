package storagefence

import (
	k8smetrics "k8s.io/component-base/metrics"
)

// Metrics are the publisher's: how many nodes the storage fences, and the
// lifts carried out. A nil *Metrics records nothing.
type Metrics struct {
	fenced *k8smetrics.Gauge
	lifts  *k8smetrics.CounterVec
}

// NewMetrics creates the metrics and registers them with registry.
func NewMetrics(registry k8smetrics.KubeRegistry) *Metrics {
	m := &Metrics{
		fenced: k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
			Subsystem:      "fenceline_attacher",
			Name:           "storage_fenced_nodes",
			Help:           "Node IDs the driver's storage fences, as its ListFences last reported them (one StorageFence each).",
			StabilityLevel: k8smetrics.ALPHA,
		}),
		lifts: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem:      "fenceline_attacher",
			Name:           "storage_fence_lifts_total",
			Help:           "LiftFence calls made for operators' lift requests, by result (success or error).",
			StabilityLevel: k8smetrics.ALPHA,
		}, []string{"result"}),
	}
	registry.MustRegister(m.fenced, m.lifts)
	return m
}

func (m *Metrics) setFenced(n int) {
	if m != nil {
		m.fenced.Set(float64(n))
	}
}

func (m *Metrics) lifted(ok bool) {
	if m == nil {
		return
	}
	result := "success"
	if !ok {
		result = "error"
	}
	m.lifts.WithLabelValues(result).Inc()
}
