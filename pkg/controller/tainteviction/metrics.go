package tainteviction

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are taint-eviction's own collectors. The two counters of pod
// deletions keep the names and labels of kube-controller-manager's
// taint-eviction-controller, so its dashboards and alerts keep working.
// The methods of a nil *Metrics do nothing.
type Metrics struct {
	// Evictions and EvictionLatency are upstream's metrics: pods deleted
	// (gracefully or, from a node cut off from storage, at once), and the
	// time from the moment the eviction was due to the delete.
	Evictions       prometheus.Counter
	EvictionLatency prometheus.Histogram
	// Held is the number of pods whose eviction is due but held (a
	// stateful pod of a dead node not yet cut off, a pod waiting for its
	// evict-when condition, a node the storm guard refuses).
	Held prometheus.Gauge
	// Refusals counts the storm guard's refusals of a node's evictions,
	// by reason.
	Refusals *prometheus.CounterVec
	// Upstream is 1 while kube-controller-manager's own
	// taint-eviction-controller is evidently running too (its Events
	// appear): Fenceline's then evicts nothing.
	Upstream prometheus.Gauge
}

// NewMetrics creates taint-eviction's collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		Evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "taint_eviction_controller",
			Name:      "pod_deletions_total",
			Help:      "Total number of Pods deleted by TaintEvictionController since its start.",
		}),
		EvictionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "taint_eviction_controller",
			Name:      "pod_deletion_duration_seconds",
			Help:      "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
			Buckets:   []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240},
		}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "held_pods",
			Help:      "Pods whose taint eviction is due but held: a stateful pod of a node that is not Ready and not yet cut off from storage, a pod waiting for its evict-when condition, or a node the storm guard refuses.",
		}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "storm_guard_refusals_total",
			Help:      "Times the storm guard refused to start the evictions of a node that is not Ready, by reason.",
		}, []string{"reason"}),
		Upstream: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "upstream_controller_active",
			Help:      "1 while kube-controller-manager's taint-eviction-controller is evidently running as well (its TaintManagerEviction Events appear); Fenceline's taint-eviction then evicts nothing.",
		}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Evictions, m.EvictionLatency, m.Held, m.Refusals, m.Upstream}
}

// observeEviction records one pod deleted, due at due (zero: no latency
// is observed).
func (m *Metrics) observeEviction(due, now time.Time) {
	if m == nil {
		return
	}
	m.Evictions.Inc()
	if !due.IsZero() {
		m.EvictionLatency.Observe(max(now.Sub(due), 0).Seconds())
	}
}

// setHeld sets the number of held pods.
func (m *Metrics) setHeld(n int) {
	if m != nil {
		m.Held.Set(float64(n))
	}
}

// observeRefusal records one storm-guard refusal.
func (m *Metrics) observeRefusal(reason string) {
	if m != nil {
		m.Refusals.WithLabelValues(reason).Inc()
	}
}

// setUpstream sets whether upstream's controller is seen.
func (m *Metrics) setUpstream(active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.Upstream.Set(v)
}
