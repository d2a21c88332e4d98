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

// Metrics are the collectors every controller shares through its
// actuator: force deletions and writes abandoned at write time, by reason.
// A controller's own collectors live in its package and join the registry
// through its descriptor. The methods of a nil *Metrics do nothing.
type Metrics struct {
	// ForceDeletes counts pods force-deleted, as upstream's pod GC does.
	ForceDeletes *prometheus.CounterVec
	// ForceDeleteErrors counts failed force deletions.
	ForceDeleteErrors *prometheus.CounterVec
	// ForceDeleteLatency is the time from the trigger (taint, NotReady,
	// deletion request, whichever came last) to the force deletion.
	ForceDeleteLatency *prometheus.HistogramVec
	// DecisionChanged counts writes abandoned because the decision, made
	// again on fresh data at write time, no longer held (e.g. the node
	// turned Ready after the cached decision). A steady rate means the
	// caches lag far behind the API server.
	DecisionChanged *prometheus.CounterVec
}

// New creates the shared collectors and registers them with reg (when not
// nil).
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
		DecisionChanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "decision_changed_total",
			Help:      "Writes not made because the decision, re-checked on fresh data at write time, no longer held.",
		}, []string{"write"}),
	}
	if err := Register(reg, m.ForceDeletes, m.ForceDeleteErrors, m.ForceDeleteLatency, m.DecisionChanged); err != nil {
		return nil, err
	}
	return m, nil
}

// Register registers cs with reg; a nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
	}
	return nil
}

// SetOrDelete sets the series of label to v when on, and removes it when
// not: a per-node gauge has a series only while its state holds.
func SetOrDelete(g *prometheus.GaugeVec, label string, on bool, v float64) {
	if on {
		g.WithLabelValues(label).Set(v)
		return
	}
	g.DeleteLabelValues(label)
}

// UnixSeconds is t in seconds since the epoch, as a timestamp gauge holds
// it.
func UnixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

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
