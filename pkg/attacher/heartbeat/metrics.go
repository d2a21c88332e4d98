package heartbeat

import (
	"time"

	k8smetrics "k8s.io/component-base/metrics"
)

// Metrics are the heartbeat's Prometheus metrics. They live here rather
// than in pkg/attacher/metrics because only this package records them; the
// names follow the same fenceline_attacher_ prefix and registry.
// A nil *Metrics records nothing.
type Metrics struct {
	renewals  *k8smetrics.CounterVec
	lastRenew *k8smetrics.Gauge
}

// NewMetrics creates the metrics and registers them with registry
// (typically the csi-lib-utils metrics manager's GetRegistry()).
func NewMetrics(registry k8smetrics.KubeRegistry) *Metrics {
	m := &Metrics{
		renewals: k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{
			Subsystem:      "fenceline_attacher",
			Name:           "heartbeat_renewals_total",
			Help:           "Attempts to renew the heartbeat Lease that tells fenceline-controller a Fenceline attacher serves the driver, by result.",
			StabilityLevel: k8smetrics.ALPHA,
		}, []string{"result"}),
		lastRenew: k8smetrics.NewGauge(&k8smetrics.GaugeOpts{
			Subsystem:      "fenceline_attacher",
			Name:           "heartbeat_last_renew_timestamp_seconds",
			Help:           "renewTime of the last successful heartbeat Lease renewal, in seconds since the epoch; alert when it falls behind by more than the Lease duration.",
			StabilityLevel: k8smetrics.ALPHA,
		}),
	}
	registry.MustRegister(m.renewals, m.lastRenew)
	return m
}

func (m *Metrics) renewed(ok bool, at time.Time) {
	if m == nil {
		return
	}
	if !ok {
		m.renewals.WithLabelValues("error").Inc()
		return
	}
	m.renewals.WithLabelValues("success").Inc()
	m.lastRenew.Set(float64(at.UnixNano()) / 1e9)
}
