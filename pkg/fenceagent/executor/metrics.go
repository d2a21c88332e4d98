package executor

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the executor's Prometheus series.
type Metrics struct {
	// Attempts counts fence attempts by method and result (Succeeded,
	// Failed, TimedOut).
	Attempts *prometheus.CounterVec
	// Duration is how long one attempt took, by method.
	Duration *prometheus.HistogramVec
}

// NewMetrics registers the executor's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceline_fence_agent_fence_attempts_total",
			Help: "Fence attempts (one FenceClass of one policy level) by method and result.",
		}, []string{"method", "result"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenceline_fence_agent_fence_attempt_duration_seconds",
			Help:    "Duration of one fence attempt, power-off and read-back included, by method.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.Attempts, m.Duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering fence executor metrics: %w", err)
		}
	}
	return m, nil
}
