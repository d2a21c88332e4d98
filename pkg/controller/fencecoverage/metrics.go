package fencecoverage

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are fence-coverage's own collectors: per policy, the nodes it
// selects and those of them that could not be fenced now. A policy has
// series while it exists. The methods of a nil *Metrics do nothing.
type Metrics struct {
	// SelectedNodes is the number of nodes the policy selects.
	SelectedNodes *prometheus.GaugeVec
	// UncoveredNodes is the number of them that cannot be fenced now.
	UncoveredNodes *prometheus.GaugeVec
	// TargetsWithoutNode is the number of FenceTargets no Node is named
	// after.
	TargetsWithoutNode prometheus.Gauge
}

// NewMetrics creates fence-coverage's collectors, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		SelectedNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "fence_coverage",
			Name:      "selected_nodes",
			Help:      "Nodes the FencePolicy selects (nodes labelled fenceline.io/exclude-from-fencing are not counted).",
		}, []string{"policy"}),
		UncoveredNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "fence_coverage",
			Name:      "uncovered_nodes",
			Help:      "Nodes the FencePolicy selects that could not be fenced now: no FenceTarget, no endpoint of the policy's classes, a fence device that does not answer or rejects its credentials, or a policy that cannot be used. The policy's status lists them.",
		}, []string{"policy"}),
		TargetsWithoutNode: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "fenceline",
			Subsystem: "fence_coverage",
			Name:      "targets_without_node",
			Help:      "FenceTargets that no Node is named after: they fence nothing (a typo, or a node that was removed).",
		}),
	}
}

// Collectors returns every collector, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.SelectedNodes, m.UncoveredNodes, m.TargetsWithoutNode}
}

// set records a policy's counts.
func (m *Metrics) set(policy string, selected, uncovered int32) {
	if m == nil {
		return
	}
	m.SelectedNodes.WithLabelValues(policy).Set(float64(selected))
	m.UncoveredNodes.WithLabelValues(policy).Set(float64(uncovered))
}

// setOrphans records the number of FenceTargets without a Node.
func (m *Metrics) setOrphans(n int) {
	if m != nil {
		m.TargetsWithoutNode.Set(float64(n))
	}
}

// forget removes a deleted policy's series.
func (m *Metrics) forget(policy string) {
	if m == nil {
		return
	}
	m.SelectedNodes.DeleteLabelValues(policy)
	m.UncoveredNodes.DeleteLabelValues(policy)
}
