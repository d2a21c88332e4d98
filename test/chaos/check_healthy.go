package chaos

import (
	"fmt"
	"time"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/test/world"
)

// The rules of invariant 4, on the nodes the episode never failed.
const (
	// RuleHealthyNodePowerCommand: the BMC of a node the episode never
	// failed received a command that cuts its power (accepted or not): a
	// decision to fence a healthy node, even where the power log shows
	// nothing (a refused or lost command).
	RuleHealthyNodePowerCommand = "healthy-node-power-off-command"
	// RuleHealthyNodeFencing: a node the episode never failed had a
	// FencingRequest in phase Fencing or Fenced, turned FencingComplete,
	// or got the out-of-service taint: the steps before a power-off or a
	// force-delete, caught even when a fault stopped the next one.
	RuleHealthyNodeFencing = "healthy-node-fencing"
)

// checkHealthyNodes is invariant 4 made explicit for every node outside
// the plan's failed set, whatever the episode did to its clock or its
// API latency: no power cut (the BMC's power log), no power-off command
// (what the BMC received), no fencing decision (requests, FencingComplete,
// out-of-service), and no pod deleted by Fenceline.
func checkHealthyNodes(f Facts, byNode map[string][]NodeState) []Finding {
	var out []Finding
	for node, log := range f.Power {
		if f.Failed[node] {
			continue
		}
		for _, c := range log {
			if !c.On {
				out = append(out, Finding{Rule: RuleHealthyNodeFenced, Detail: fmt.Sprintf("the BMC of %s, a node the episode never failed%s, cut its power at %s", node, f.skewOf(node), clock(c.Time))})
			}
		}
	}
	for node, cmds := range f.PowerCommands {
		if f.Failed[node] {
			continue
		}
		for _, c := range cmds {
			if cutsPower(c) {
				out = append(out, Finding{Rule: RuleHealthyNodePowerCommand, Detail: fmt.Sprintf("the BMC of %s, a node the episode never failed%s, received %s (accepted %t)", node, f.skewOf(node), c.Action, c.OK)})
			}
		}
	}
	for node, states := range byNode {
		if f.Failed[node] {
			continue
		}
		for _, s := range states {
			if s.FencingComplete || s.OutOfService != nil {
				out = append(out, Finding{Rule: RuleHealthyNodeFencing, Detail: fmt.Sprintf("%s, a node the episode never failed%s, was FencingComplete=%t out-of-service=%t at rv %d (seen %s)", node, f.skewOf(node), s.FencingComplete, s.OutOfService != nil, s.RV, clock(s.Seen))})
				break
			}
		}
	}
	reported := map[string]bool{}
	for _, r := range f.Requests {
		if f.Failed[r.Node] || r.Gone || reported[r.Node] {
			continue
		}
		if r.Phase == fencingv1alpha1.FencingPhaseFencing || r.Phase == fencingv1alpha1.FencingPhaseFenced {
			reported[r.Node] = true
			out = append(out, Finding{Rule: RuleHealthyNodeFencing, Detail: fmt.Sprintf("%s, a node the episode never failed%s, had FencingRequest %s in phase %s at rv %d (seen %s)", r.Node, f.skewOf(r.Node), r.Name, r.Phase, r.RV, clock(r.Seen))})
		}
	}
	return append(out, checkHealthyDeletions(f)...)
}

// checkHealthyDeletions judges the pods deleted from nodes the episode
// never failed: Fenceline's (marked) are violations; those of
// kube-controller-manager's taint eviction and unmarked ones are
// reported as another component's.
func checkHealthyDeletions(f Facts) []Finding {
	var out []Finding
	for _, d := range f.Deletions {
		if d.Node == "" || f.Failed[d.Node] {
			continue
		}
		pod := d.Namespace + "/" + d.Name
		switch {
		case f.UpstreamTaintEviction && d.Disruption == "DeletionByTaintManager":
			out = append(out, Finding{Rule: RuleUpstreamEvictedReplacement, Upstream: true, Detail: fmt.Sprintf("pod %s deleted from %s, a node the episode never failed, by kube-controller-manager's taint eviction (rv %d, seen %s)", pod, d.Node, d.RV, clock(d.Seen))})
		case d.Disruption == "":
			out = append(out, Finding{Rule: RuleUnmarkedDeletion, Upstream: true, Detail: fmt.Sprintf("pod %s deleted from %s, a node the episode never failed, without a DisruptionTarget condition: not by Fenceline (rv %d, seen %s)", pod, d.Node, d.RV, clock(d.Seen))})
		default:
			out = append(out, Finding{Rule: RuleHealthyNodePodDeleted, Detail: fmt.Sprintf("pod %s deleted from %s, a node the episode never failed%s (rv %d, seen %s)", pod, d.Node, f.skewOf(d.Node), d.RV, clock(d.Seen))})
		}
	}
	return out
}

// cutsPower reports whether a BMC command asks for anything but a
// power-on: every other reset type or chassis action stops the node.
func cutsPower(c world.PowerCommand) bool {
	return c.Action != "On" && c.Action != "power up"
}

// skewOf says, for a finding's detail, how far off node's clock ran.
func (f Facts) skewOf(node string) string {
	if d := f.Skews[node]; d != 0 {
		return fmt.Sprintf(" (its clock %s %s)", map[bool]string{true: "ahead by", false: "behind by"}[d > 0], d.Abs().Round(time.Second))
	}
	return ""
}
