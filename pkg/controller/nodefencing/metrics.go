package nodefencing

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenceline.io/fenceline/pkg/controller/metrics"
)

// Metrics are node-fencing's own collectors. A node has a per-node series
// only while its state holds, so the series stay few: the nodes that are
// down now, not every node of the cluster. The methods of a nil *Metrics
// do nothing.
type Metrics struct {
	// FencingTransitions counts FencingRequests entering a phase.
	FencingTransitions *prometheus.CounterVec
	// FencingLatency is the time from a FencingRequest's creation to the
	// phase it entered (Fenced, Recovered, Failed).
	FencingLatency *prometheus.HistogramVec
	// FencedSince is the fencedTime of the node's open FencingRequest
	// (Fenced or Recovering), in seconds since the epoch.
	FencedSince *prometheus.GaugeVec
	// FencingFailed is 1 while a Failed FencingRequest of the node's
	// current boot blocks any new request for it.
	FencingFailed *prometheus.GaugeVec
	// StormGuardRefusals counts the storm guard's refusals to admit a
	// FencingRequest, by reason.
	StormGuardRefusals *prometheus.CounterVec
	// LyingFence is 1 while the node's Fenced request is a lying fence
	// (the node alive with the boot ID it had when fenced).
	LyingFence *prometheus.GaugeVec
	// LyingFencesCaught counts the lying fences caught.
	LyingFencesCaught prometheus.Counter
	// PowerChecks counts the power checks asked of the fence agent for
	// nodes that missed a Lease renewal.
	PowerChecks prometheus.Counter
}

// NewMetrics creates node-fencing's collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		FencingTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "requests_total",
			Help:      "FencingRequests that entered a phase (Pending counts the requests created), by phase and reason.",
		}, []string{"phase", "reason"}),
		FencingLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "phase_latency_seconds",
			Help:      "Time from a FencingRequest's creation to the phase it entered (Fenced, Recovered, Failed).",
			Buckets:   []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600},
		}, []string{"phase"}),
		FencedSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "fenced_since_timestamp_seconds",
			Help:      "When the node's open FencingRequest verified the fence (its fencedTime), in seconds since the epoch; a series exists while the node is fenced (phase Fenced or Recovering).",
		}, []string{"node"}),
		FencingFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "failed",
			Help:      "1 while a Failed FencingRequest of the node's current boot blocks any new request for it, or while the marks a Failed or deleted request left keep the node unschedulable; no series otherwise.",
		}, []string{"node"}),
		StormGuardRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "storm_guard_refusals_total",
			Help:      "Times the node-fencing storm guard refused to admit an automatic FencingRequest, by reason.",
		}, []string{"reason"}),
		LyingFence: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "lying_fence",
			Help:      "1 while the node, recorded fenced (power read back Off), is observed alive with the boot ID it had when fenced: its fence device lied; no series otherwise.",
		}, []string{"node"}),
		LyingFencesCaught: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "lying_fences_total",
			Help:      "Lying fences caught: a node recorded fenced observed alive with the boot ID it had when fenced.",
		}),
		PowerChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "node_fencing",
			Name:      "power_checks_total",
			Help:      "Power checks asked of the fence agent (read-only) for nodes that missed a Lease renewal; a node whose every fence device reads Off is a candidate at once (reason PowerOffObserved).",
		}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.FencingTransitions, m.FencingLatency, m.FencedSince, m.FencingFailed, m.StormGuardRefusals, m.LyingFence, m.LyingFencesCaught, m.PowerChecks}
}

// ObserveFencingPhase records a FencingRequest entering phase, created at
// created (zero: no latency is observed).
func (m *Metrics) ObserveFencingPhase(phase, reason string, created, now time.Time) {
	if m == nil {
		return
	}
	m.FencingTransitions.WithLabelValues(phase, reason).Inc()
	if created.IsZero() {
		return
	}
	switch phase {
	case "Fenced", "Recovered", "Failed":
		m.FencingLatency.WithLabelValues(phase).Observe(max(now.Sub(created), 0).Seconds())
	}
}

// SetNodeFencing records a node's fencing state as its latest sync saw it:
// fenced since fencedSince (zero: not fenced), and whether its fencing
// failed: a Failed request blocks it, or a Failed or deleted request's marks
// are left on it.
func (m *Metrics) SetNodeFencing(node string, fencedSince time.Time, failed bool) {
	if m == nil {
		return
	}
	metrics.SetOrDelete(m.FencedSince, node, !fencedSince.IsZero(), metrics.UnixSeconds(fencedSince))
	metrics.SetOrDelete(m.FencingFailed, node, failed, 1)
}

// ObserveFencingRefusal records one storm-guard refusal of a FencingRequest.
func (m *Metrics) ObserveFencingRefusal(reason string) {
	if m != nil {
		m.StormGuardRefusals.WithLabelValues(reason).Inc()
	}
}

// SetLyingFence records whether the node's fence is a lying one now.
func (m *Metrics) SetLyingFence(node string, lying bool) {
	if m != nil {
		metrics.SetOrDelete(m.LyingFence, node, lying, 1)
	}
}

// ObserveLyingFenceCaught counts a lying fence caught.
func (m *Metrics) ObserveLyingFenceCaught() {
	if m != nil {
		m.LyingFencesCaught.Inc()
	}
}

// ObservePowerCheck counts a power check asked.
func (m *Metrics) ObservePowerCheck() {
	if m != nil {
		m.PowerChecks.Inc()
	}
}
