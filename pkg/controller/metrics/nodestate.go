package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// nodeState are the per-node gauges an alert needs to tell how long a node
// has been cut off, and the node-fencing storm guard's refusals. A node has
// a series only while the state holds, so the series stay few: the nodes
// that are down now, not every node of the cluster.
type nodeState struct {
	// FencedSince is the fencedTime of the node's open FencingRequest
	// (Fenced or Recovering), in seconds since the epoch.
	FencedSince *prometheus.GaugeVec
	// FencingFailed is 1 while a Failed FencingRequest of the node's
	// current boot blocks any new request for it.
	FencingFailed *prometheus.GaugeVec
	// QuarantinedSince is when this process first saw the node carry the
	// quarantine taint, in seconds since the epoch.
	QuarantinedSince *prometheus.GaugeVec
	// StormGuardRefusals counts the node-fencing storm guard's refusals
	// to admit a FencingRequest, by reason.
	StormGuardRefusals *prometheus.CounterVec
	// SafeDetachRefusedPods is the number of pods quarantine refuses to
	// force-delete now, for want of a fence it can count on.
	SafeDetachRefusedPods prometheus.Gauge
	// LyingFence is 1 while the node's Fenced request is a lying fence
	// (the node alive with the boot ID it had when fenced).
	LyingFence *prometheus.GaugeVec
	// LyingFencesCaught counts the lying fences caught.
	LyingFencesCaught prometheus.Counter
}

func newNodeState() nodeState {
	return nodeState{
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
		QuarantinedSince: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "quarantined_since_timestamp_seconds",
			Help:      "When the controller first saw the node carry the fenceline.io/quarantine taint, in seconds since the epoch; a series exists while the taint is there.",
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
		SafeDetachRefusedPods: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "controller",
			Name:      "safe_detach_refused_pods",
			Help:      "Pods of safe-detach drivers on a node NotReady past the quarantine delay that quarantine refuses to force-delete: no fresh heartbeat of a fence-capable fenceline-attacher serves the driver, the CSIDriver has attachRequired false, or a volume is ReadWriteMany.",
		}),
	}
}

func (s nodeState) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.FencedSince, s.FencingFailed, s.QuarantinedSince, s.StormGuardRefusals, s.SafeDetachRefusedPods, s.LyingFence, s.LyingFencesCaught}
}

// SetNodeFencing records a node's fencing state as its latest sync saw it:
// fenced since fencedSince (zero: not fenced), and whether its fencing
// failed: a Failed request blocks it, or a Failed or deleted request's marks
// are left on it.
func (m *Metrics) SetNodeFencing(node string, fencedSince time.Time, failed bool) {
	if m == nil {
		return
	}
	if fencedSince.IsZero() {
		m.FencedSince.DeleteLabelValues(node)
	} else {
		m.FencedSince.WithLabelValues(node).Set(unixSeconds(fencedSince))
	}
	if failed {
		m.FencingFailed.WithLabelValues(node).Set(1)
	} else {
		m.FencingFailed.DeleteLabelValues(node)
	}
}

// SetQuarantinedSince records when the node was first seen quarantined;
// zero removes its series.
func (m *Metrics) SetQuarantinedSince(node string, since time.Time) {
	if m == nil {
		return
	}
	if since.IsZero() {
		m.QuarantinedSince.DeleteLabelValues(node)
		return
	}
	m.QuarantinedSince.WithLabelValues(node).Set(unixSeconds(since))
}

// ObserveFencingRefusal records one storm-guard refusal of a FencingRequest.
func (m *Metrics) ObserveFencingRefusal(reason string) {
	if m != nil {
		m.StormGuardRefusals.WithLabelValues(reason).Inc()
	}
}

// SetSafeDetachRefusedPods sets the number of pods quarantine refuses now.
func (m *Metrics) SetSafeDetachRefusedPods(n int) {
	if m != nil {
		m.SafeDetachRefusedPods.Set(float64(n))
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// SetLyingFence records whether the node's fence is a lying one now.
func (m *Metrics) SetLyingFence(node string, lying bool) {
	if m == nil {
		return
	}
	if lying {
		m.LyingFence.WithLabelValues(node).Set(1)
		return
	}
	m.LyingFence.DeleteLabelValues(node)
}

// ObserveLyingFenceCaught counts a lying fence caught.
func (m *Metrics) ObserveLyingFenceCaught() {
	if m != nil {
		m.LyingFencesCaught.Inc()
	}
}
