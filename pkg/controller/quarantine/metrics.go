package quarantine

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"fenceline.io/fenceline/pkg/controller/metrics"
)

// Metrics are quarantine's own collectors. The methods of a nil *Metrics
// do nothing.
type Metrics struct {
	// QuarantinedNodes is the number of nodes carrying the quarantine taint.
	QuarantinedNodes prometheus.Gauge
	// QuarantinedSince is when this process first saw the node carry the
	// quarantine taint, in seconds since the epoch; a node has a series
	// only while it carries the taint.
	QuarantinedSince *prometheus.GaugeVec
	// SafeDetachRefusedPods is the number of pods quarantine refuses to
	// force-delete now, for want of a fence it can count on.
	SafeDetachRefusedPods prometheus.Gauge
}

// NewMetrics creates quarantine's collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		QuarantinedNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "quarantined_nodes",
			Help:      "Number of nodes that carry the fenceline.io/quarantine taint.",
		}),
		QuarantinedSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "quarantined_since_timestamp_seconds",
			Help:      "When the controller first saw the node carry the fenceline.io/quarantine taint, in seconds since the epoch; a series exists while the taint is there.",
		}, []string{"node"}),
		SafeDetachRefusedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "safe_detach_refused_pods",
			Help:      "Pods of safe-detach drivers on a node NotReady past the quarantine delay that quarantine refuses to force-delete: no fresh heartbeat of a fence-capable fenceline-attacher serves the driver, the CSIDriver has attachRequired false, or a volume is ReadWriteMany.",
		}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.QuarantinedNodes, m.QuarantinedSince, m.SafeDetachRefusedPods}
}

// setQuarantined records the number of quarantined nodes and when node was
// first seen quarantined; a zero since removes its series.
func (m *Metrics) setQuarantined(nodes int, node string, since time.Time) {
	if m == nil {
		return
	}
	m.QuarantinedNodes.Set(float64(nodes))
	metrics.SetOrDelete(m.QuarantinedSince, node, !since.IsZero(), metrics.UnixSeconds(since))
}

// setRefusedPods sets the number of pods quarantine refuses now.
func (m *Metrics) setRefusedPods(n int) {
	if m != nil {
		m.SafeDetachRefusedPods.Set(float64(n))
	}
}
