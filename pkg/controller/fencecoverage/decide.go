// Package fencecoverage is the fence-coverage controller: for every
// FencePolicy it finds, before any node dies, the nodes the policy selects
// that could not be fenced now (no FenceTarget, no endpoint of the
// policy's classes, a fence device that does not answer or rejects its
// credentials, a policy that cannot be used), and says so in the policy's
// status, in metrics and in Events. It decides nothing about fencing: the
// node-fencing controller re-checks all of it when a node is down.
package fencecoverage

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
)

// Name is the controller's name in --controllers, its user agent and logs.
const Name = "fence-coverage"

// Reasons a selected node cannot be fenced, besides the reasons of a
// FenceTarget's Reachable condition, which are passed on as they are.
const (
	ReasonPolicyNotUsable     = "PolicyNotUsable"
	ReasonSeveralPolicies     = "SeveralPolicies"
	ReasonNoFenceTarget       = "NoFenceTarget"
	ReasonNoEndpointForPolicy = "NoEndpointForPolicy"
	ReasonNotProbed           = "NotProbed"
)

// Input is what Decide needs about one policy.
type Input struct {
	// Policy is the policy whose coverage is decided.
	Policy *fencingv1alpha1.FencePolicy
	// Problem is nodefencing.PolicyProblem's verdict on it: "" when it can
	// be used.
	Problem string
	// Policies are every FencePolicy, to find the nodes that several
	// select (such a node is not fenced).
	Policies []*fencingv1alpha1.FencePolicy
	// Nodes are the nodes the policy's selector matches (more do no harm:
	// Decide matches again).
	Nodes []*v1.Node
	// Targets are the FenceTargets by name (a node's is named after it).
	Targets map[string]*fencingv1alpha1.FenceTarget
}

// Decide is the policy's coverage: the nodes it selects (Assess) and the
// first MaxUncoveredListed of those that cannot be fenced now, by name.
func Decide(in Input) fencingv1alpha1.FenceCoverage {
	selected, uncovered := Assess(in)
	return Coverage(in.Policy, selected, uncovered)
}

// Coverage is the status of a policy for which Assess found selected
// nodes and uncovered ones: the list is cut, the count is not.
func Coverage(policy *fencingv1alpha1.FencePolicy, selected int32, uncovered []fencingv1alpha1.UncoveredNode) fencingv1alpha1.FenceCoverage {
	cov := fencingv1alpha1.FenceCoverage{ObservedGeneration: policy.Generation, SelectedNodes: selected, UncoveredNodes: int32(len(uncovered))}
	if len(uncovered) > fencingv1alpha1.MaxUncoveredListed {
		uncovered = uncovered[:fencingv1alpha1.MaxUncoveredListed]
	}
	cov.Uncovered = uncovered
	return cov
}

// Assess counts the nodes the policy selects, leaving out those labelled
// fenceline.io/exclude-from-fencing, and returns every one of them that
// cannot be fenced now, by name.
func Assess(in Input) (selected int32, uncovered []fencingv1alpha1.UncoveredNode) {
	sel := nodefencing.Selector(in.Policy)
	for _, n := range in.Nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		if _, excluded := n.Labels[detect.ExcludeLabel]; excluded {
			continue
		}
		selected++
		if reason, message := NodeCoverage(n, in.Policy, in.Problem, in.Policies, in.Targets[n.Name]); reason != "" {
			uncovered = append(uncovered, fencingv1alpha1.UncoveredNode{Node: n.Name, Reason: reason, Message: message})
		}
	}
	slices.SortFunc(uncovered, func(a, b fencingv1alpha1.UncoveredNode) int { return strings.Compare(a.Node, b.Node) })
	return selected, uncovered
}

// NodeCoverage says why node, which policy selects, could not be fenced
// now ("" when it could): the policy cannot be used (problem), another
// policy selects the node too, the node has no FenceTarget, the target has
// no endpoint of a FenceClass the policy's levels name, the fence agent
// has not probed the target's current spec, or the probe failed (the
// Reachable condition's reason and message).
func NodeCoverage(node *v1.Node, policy *fencingv1alpha1.FencePolicy, problem string, policies []*fencingv1alpha1.FencePolicy, target *fencingv1alpha1.FenceTarget) (reason, message string) {
	if problem != "" {
		return ReasonPolicyNotUsable, problem
	}
	if resolved, why := nodefencing.ResolvePolicy(node, "", policies); resolved == nil && why != "" {
		return ReasonSeveralPolicies, why
	}
	if target == nil {
		return ReasonNoFenceTarget, fmt.Sprintf("no FenceTarget %s: create one with the node's fence device endpoints", node.Name)
	}
	classes := policyClasses(policy)
	if !slices.ContainsFunc(target.Spec.Endpoints, func(e fencingv1alpha1.FenceEndpoint) bool { return slices.Contains(classes, e.FenceClassName) }) {
		return ReasonNoEndpointForPolicy, fmt.Sprintf("FenceTarget %s has no endpoint of a FenceClass that FencePolicy %s's levels name (%s)", target.Name, policy.Name, strings.Join(classes, ", "))
	}
	c := meta.FindStatusCondition(target.Status.Conditions, fencingv1alpha1.FenceTargetReachable)
	if c == nil || target.Status.ObservedGeneration != target.Generation || c.ObservedGeneration != target.Generation {
		return ReasonNotProbed, fmt.Sprintf("fenceline-fence-agent has not yet probed FenceTarget %s as it is now; is the fence agent running?", target.Name)
	}
	if c.Status != metav1.ConditionTrue {
		return c.Reason, c.Message
	}
	return "", ""
}

// policyClasses are the FenceClasses the policy's levels name, each once,
// in level order.
func policyClasses(p *fencingv1alpha1.FencePolicy) []string {
	var out []string
	for _, l := range p.Spec.Levels {
		for _, c := range l.FenceClassNames {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}
