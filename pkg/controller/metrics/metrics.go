// Package metrics defines the Prometheus metrics of fenceline-controller.
// Where a metric means the same as one of kube-controller-manager's pod GC
// metrics it keeps upstream's name and labels, so existing dashboards and
// alerts keep working; Fenceline's own metrics are prefixed fenceline_.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons for a force deletion, used as the "reason" label.
const (
	ReasonOutOfService  = "out-of-service"
	ReasonSafeDetach    = "safe-detach"
	ReasonForceEviction = "force-eviction"
	ReasonTaintEviction = "taint-eviction"
)

// Metrics is the set of collectors one controller process updates.
type Metrics struct {
	// ForceDeletes counts pods force-deleted, as upstream's pod GC does.
	ForceDeletes *prometheus.CounterVec
	// ForceDeleteErrors counts failed force deletions.
	ForceDeleteErrors *prometheus.CounterVec
	// ForceDeleteLatency is the time from the trigger (taint, NotReady,
	// deletion request, whichever came last) to the force deletion.
	ForceDeleteLatency *prometheus.HistogramVec
	// QuarantinedNodes is the number of nodes carrying the quarantine taint.
	QuarantinedNodes prometheus.Gauge
	// DecisionChanged counts writes abandoned because the decision, made
	// again on fresh data at write time, no longer held (e.g. the node
	// turned Ready after the cached decision). A steady rate means the
	// caches lag far behind the API server.
	DecisionChanged *prometheus.CounterVec
	// FencingTransitions counts FencingRequests entering a phase.
	FencingTransitions *prometheus.CounterVec
	// FencingLatency is the time from a FencingRequest's creation to the
	// phase it entered (Fenced, Recovered, Failed).
	FencingLatency *prometheus.HistogramVec
	// TaintEvictions and TaintEvictionLatency are kube-controller-
	// manager's taint-eviction-controller metrics under their upstream
	// names: pods deleted by taint-eviction (gracefully or, from a node cut
	// off from storage, at once), and the time from the moment the
	// eviction was due to the delete.
	TaintEvictions       prometheus.Counter
	TaintEvictionLatency prometheus.Histogram
	// TaintEvictionHeld is the number of pods whose eviction is due but
	// held (a stateful pod of a dead node not yet cut off, a pod waiting
	// for its evict-when condition, a node the storm guard refuses).
	TaintEvictionHeld prometheus.Gauge
	// TaintEvictionRefusals counts the storm guard's refusals of a node's
	// evictions, by reason.
	TaintEvictionRefusals *prometheus.CounterVec
	// UpstreamTaintEviction is 1 while kube-controller-manager's own
	// taint-eviction-controller is evidently running too (its Events
	// appear): Fenceline's then evicts nothing.
	UpstreamTaintEviction prometheus.Gauge
	// nodeState holds the per-node fencing and quarantine gauges.
	nodeState
}

// New creates the collectors and registers them with reg (when not nil).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ForceDeletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "pod_gc_collector",
			Name:      "force_delete_pods_total",
			Help:      "Number of pods that are being forcefully deleted since the controller started.",
		}, []string{"namespace", "reason"}),
		ForceDeleteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "pod_gc_collector",
			Name:      "force_delete_pod_errors_total",
			Help:      "Number of errors encountered when forcefully deleting pods since the controller started.",
		}, []string{"namespace", "reason"}),
		ForceDeleteLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "force_delete_latency_seconds",
			Help:      "Time from the condition that made a pod eligible (taint, node NotReady or deletion request, whichever came last) to its force deletion.",
			Buckets:   []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300},
		}, []string{"reason"}),
		QuarantinedNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "quarantined_nodes",
			Help:      "Number of nodes that carry the fenceline.io/quarantine taint.",
		}),
		DecisionChanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "decision_changed_total",
			Help:      "Writes not made because the decision, re-checked on fresh data at write time, no longer held.",
		}, []string{"write"}),
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
		TaintEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "taint_eviction_controller",
			Name:      "pod_deletions_total",
			Help:      "Total number of Pods deleted by TaintEvictionController since its start.",
		}),
		TaintEvictionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "taint_eviction_controller",
			Name:      "pod_deletion_duration_seconds",
			Help:      "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
			Buckets:   []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240},
		}),
		TaintEvictionHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "held_pods",
			Help:      "Pods whose taint eviction is due but held: a stateful pod of a node that is not Ready and not yet cut off from storage, a pod waiting for its evict-when condition, or a node the storm guard refuses.",
		}),
		TaintEvictionRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "storm_guard_refusals_total",
			Help:      "Times the storm guard refused to start the evictions of a node that is not Ready, by reason.",
		}, []string{"reason"}),
		UpstreamTaintEviction: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "taint_eviction",
			Name:      "upstream_controller_active",
			Help:      "1 while kube-controller-manager's taint-eviction-controller is evidently running as well (its TaintManagerEviction Events appear); Fenceline's taint-eviction then evicts nothing.",
		}),
		nodeState: newNodeState(),
	}
	if reg != nil {
		for _, c := range append([]prometheus.Collector{m.ForceDeletes, m.ForceDeleteErrors, m.ForceDeleteLatency, m.QuarantinedNodes, m.DecisionChanged, m.FencingTransitions, m.FencingLatency,
			m.TaintEvictions, m.TaintEvictionLatency, m.TaintEvictionHeld, m.TaintEvictionRefusals, m.UpstreamTaintEviction}, m.nodeState.collectors()...) {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

// ObserveForceDelete records one successful force deletion.
func (m *Metrics) ObserveForceDelete(namespace, reason string, trigger, now time.Time) {
	if m == nil {
		return
	}
	m.ForceDeletes.WithLabelValues(namespace, reason).Inc()
	if !trigger.IsZero() {
		d := now.Sub(trigger)
		if d < 0 {
			d = 0
		}
		m.ForceDeleteLatency.WithLabelValues(reason).Observe(d.Seconds())
	}
}

// ObserveForceDeleteError records one failed force deletion.
func (m *Metrics) ObserveForceDeleteError(namespace, reason string) {
	if m == nil {
		return
	}
	m.ForceDeleteErrors.WithLabelValues(namespace, reason).Inc()
}

// ObserveDecisionChanged records one write abandoned at write time.
func (m *Metrics) ObserveDecisionChanged(write string) {
	if m == nil {
		return
	}
	m.DecisionChanged.WithLabelValues(write).Inc()
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

// ObserveTaintEviction records one pod deleted by taint-eviction, due at
// due (zero: no latency is observed).
func (m *Metrics) ObserveTaintEviction(due, now time.Time) {
	if m == nil {
		return
	}
	m.TaintEvictions.Inc()
	if !due.IsZero() {
		m.TaintEvictionLatency.Observe(max(now.Sub(due), 0).Seconds())
	}
}

// SetTaintEvictionHeld sets the number of held pods.
func (m *Metrics) SetTaintEvictionHeld(n int) {
	if m != nil {
		m.TaintEvictionHeld.Set(float64(n))
	}
}

// ObserveTaintEvictionRefusal records one storm-guard refusal.
func (m *Metrics) ObserveTaintEvictionRefusal(reason string) {
	if m != nil {
		m.TaintEvictionRefusals.WithLabelValues(reason).Inc()
	}
}

// SetUpstreamTaintEviction sets whether upstream's controller is seen.
func (m *Metrics) SetUpstreamTaintEviction(active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.UpstreamTaintEviction.Set(v)
}
