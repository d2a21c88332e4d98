package stormguard

import (
	v1 "k8s.io/api/core/v1"
)

// ZoneState is the health of one zone as the node lifecycle controller
// computes it (k/k pkg/controller/nodelifecycle, ComputeZoneState).
type ZoneState string

const (
	// Normal: fewer than three unhealthy nodes, or less than the
	// threshold fraction of the zone.
	Normal ZoneState = "Normal"
	// PartialDisruption: more than two unhealthy nodes and at least the
	// threshold fraction of the zone (but some healthy).
	PartialDisruption ZoneState = "PartialDisruption"
	// FullDisruption: no healthy node in the zone.
	FullDisruption ZoneState = "FullDisruption"
)

// ZoneHealth counts one zone's nodes.
type ZoneHealth struct {
	Size, Unhealthy int
	State           ZoneState
}

// ComputeZoneState classifies a zone as upstream does: FullDisruption when
// no node is healthy, PartialDisruption when more than two are unhealthy
// and unhealthy/size >= threshold, Normal otherwise (an empty zone is
// Normal). Upstream divides in float32; float64 gives the same answer at
// every boundary a cluster can have (exactly 0.55 of 20 nodes is 11).
func ComputeZoneState(size, unhealthy int, threshold float64) ZoneState {
	healthy := size - unhealthy
	switch {
	case healthy == 0 && unhealthy > 0:
		return FullDisruption
	case unhealthy > 2 && float64(unhealthy)/float64(size) >= threshold:
		return PartialDisruption
	}
	return Normal
}

// Zones groups the nodes by zone and classifies each zone.
func Zones(nodes []NodeHealth, threshold float64) map[string]ZoneHealth {
	zones := map[string]ZoneHealth{}
	for _, n := range nodes {
		z := zones[n.Zone]
		z.Size++
		if !n.Healthy {
			z.Unhealthy++
		}
		zones[n.Zone] = z
	}
	for k, z := range zones {
		z.State = ComputeZoneState(z.Size, z.Unhealthy, threshold)
		zones[k] = z
	}
	return zones
}

// allFullyDisrupted reports upstream's "master disruption mode": every zone
// (so every node the controller sees) is unhealthy. No zone at all counts
// too: a view without nodes proves nothing healthy.
func allFullyDisrupted(zones map[string]ZoneHealth) bool {
	for _, z := range zones {
		if z.State != FullDisruption {
			return false
		}
	}
	return true
}

// ZoneOf returns the node's zone under the policy's zone label: the label's
// value, or "" for a node without it (upstream puts nodes without zone
// labels in the "" zone too). Unlike upstream's zone key it does not
// prefix the region: zone names are assumed unique across regions, as the
// major providers name them (us-east-1a, europe-west1-b).
func ZoneOf(node *v1.Node, zoneLabel string) string {
	if node == nil || zoneLabel == "" {
		return ""
	}
	return node.Labels[zoneLabel]
}
