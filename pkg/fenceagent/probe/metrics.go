package probe

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the probe's Prometheus series.
type Metrics struct {
	// Probes counts probes of a target by result: the Reachable
	// condition's reason (Reachable, CredentialsRejected, Unreachable, ...).
	Probes *prometheus.CounterVec
	// Reachable is 1 when a target's last probe reached every endpoint.
	Reachable *prometheus.GaugeVec
	// Duration is how long one endpoint's power-status query took, by
	// method.
	Duration *prometheus.HistogramVec
	// PowerChecks counts the power checks answered, by the power state
	// read (Off, On, Unknown).
	PowerChecks *prometheus.CounterVec
}

// NewMetrics registers the probe's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceline_fence_agent_probe_total",
			Help: "FenceTarget probes by result (the Reachable condition's reason).",
		}, []string{"result"}),
		Reachable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fenceline_fence_agent_target_reachable",
			Help: "1 when the last probe of the FenceTarget reached every endpoint, 0 otherwise.",
		}, []string{"target"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenceline_fence_agent_probe_duration_seconds",
			Help:    "Duration of one endpoint's power-status query, by method.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
		PowerChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceline_fence_agent_power_checks_total",
			Help: "Power checks asked by fenceline-controller for a node that missed a Lease renewal, answered, by the power state read.",
		}, []string{"power_state"}),
	}
	for _, c := range []prometheus.Collector{m.Probes, m.Reachable, m.Duration, m.PowerChecks} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering fence agent metrics: %w", err)
		}
	}
	return m, nil
}
