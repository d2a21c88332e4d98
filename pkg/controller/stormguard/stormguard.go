// Package stormguard decides whether one more node may be fenced, or have
// its pods evicted by taint-eviction, now, given the whole cluster as the
// controller sees it. Fencing a node that is dead
// costs nothing; fencing many nodes because the controller's view is wrong
// (an API server or network fault makes healthy kubelets look silent) can
// take down a healthy cluster. The guard therefore refuses whenever the
// view looks more like a control-plane fault than like node deaths, and
// limits how fast and how many nodes are fenced otherwise. It mirrors the
// node lifecycle controller's zone rules (k/k pkg/controller/nodelifecycle)
// and NodeHealthCheck's storm recovery (medik8s/node-healthcheck-operator).
//
// Admit is pure: the token bucket and the storm state are passed in and
// the new ones returned, and the time is passed in.
package stormguard

import (
	"fmt"
	"time"
)

// NodeHealth is one node as the controller sees it.
type NodeHealth struct {
	Name string
	// Zone is ZoneOf(node, policy zone label); "" for no label.
	Zone string
	// Healthy: Ready and not a fencing candidate (upstream counts Ready).
	Healthy bool
	// Fencing: a fence of the node is in progress (it holds a slot of
	// MaxConcurrentFencing).
	Fencing bool
}

// Candidate is the node asked about.
type Candidate struct {
	Name, Zone string
}

// Storm is NHC's storm state, kept by the caller between calls and
// returned updated in Decision.NewStorm.
type Storm struct {
	// Active: the last call saw the maxUnhealthy/minHealthy limit breached;
	// Since is when that storm began.
	Active bool
	Since  time.Time
	// LastExit is when the last storm ended; the cooldown runs from it.
	LastExit time.Time
}

// Input is everything Admit decides on.
type Input struct {
	Candidate Candidate
	// Attempts is the number of fencing attempts the candidate's request
	// has already made.
	Attempts int
	// Nodes are the nodes the policy covers, the candidate among them.
	Nodes  []NodeHealth
	Policy Policy
	Bucket Bucket
	Storm  Storm
	Now    time.Time
}

// Reasons of a Decision, CamelCase for conditions and Events.
const (
	ReasonAdmitted               = "Admitted"
	ReasonInvalidPolicy          = "InvalidPolicy"
	ReasonNoNodes                = "NoNodesObserved"
	ReasonCandidateNotObserved   = "CandidateNotObserved"
	ReasonCandidateHealthy       = "CandidateHealthy"
	ReasonMaxAttemptsReached     = "MaxAttemptsReached"
	ReasonAllZonesFullyDisrupted = "AllZonesFullyDisrupted"
	ReasonStormActive            = "StormActive"
	ReasonStormCooldownActive    = "StormCooldownActive"
	ReasonZonePartialDisruption  = "ZonePartialDisruption"
	ReasonMaxConcurrentFencing   = "MaxConcurrentFencing"
	ReasonRateLimited            = "RateLimited"
)

// Decision is the outcome of Admit.
type Decision struct {
	Admit bool
	// Reason is one of the Reason constants; Why says it with the numbers,
	// for Events and condition messages.
	Reason, Why string
	// RetryAfter, on a refusal, is when the refusal lifts by itself if the
	// cluster does not change (a token refills, the cooldown ends). Zero:
	// only a change of the cluster (a node event) can lift it.
	RetryAfter time.Duration
	// Final: the request must give up (MaxAttemptsReached).
	Final bool
	// NewBucket and NewStorm replace the caller's state, admitted or not.
	NewBucket Bucket
	NewStorm  Storm
}

// view is the cluster as Admit reads it.
type view struct {
	total, unhealthy, fencingOthers int
	zones                           map[string]ZoneHealth
	cand                            NodeHealth
	found                           bool
}

func observe(in Input) view {
	v := view{total: len(in.Nodes), zones: Zones(in.Nodes, in.Policy.Zones.UnhealthyZoneThreshold)}
	for _, n := range in.Nodes {
		if !n.Healthy {
			v.unhealthy++
		}
		if n.Name == in.Candidate.Name {
			v.cand, v.found = n, true
		} else if n.Fencing {
			v.fencingOthers++
		}
	}
	return v
}

// Admit is the single place that states when one more node may be fenced;
// the controller calls it on fresh data right before it starts a fence.
// Rules, in the order they refuse:
//  1. an invalid policy or rate, no observed node, a candidate missing from
//     the view, seen in another zone, or seen healthy: refuse (safe action);
//  2. Attempts >= MaxAttempts: refuse for good (Final);
//  3. every zone in FullDisruption (no healthy node at all): refuse;
//  4. maxUnhealthy exceeded or minHealthy not met: refuse, storm active;
//     the call that sees it clear ends the storm and starts the cooldown,
//     which refuses until it has run;
//  5. the candidate's zone in PartialDisruption: refuse when the zone has
//     at most LargeClusterSize nodes or PartialDisruptionRate is 0,
//     otherwise fence at that rate with a burst of 1;
//  6. MaxConcurrentFencing other nodes being fenced: refuse;
//  7. no token in the bucket: refuse until one refills;
//  8. otherwise admit and take a token.
//
// A zone in FullDisruption while another zone is not is fenced at the
// normal rate, as upstream evicts it: a whole zone down (a rack without
// power) is what fencing is for, and rules 4 and 6 still bound it.
func Admit(in Input) Decision {
	d := Decision{NewBucket: in.Bucket, NewStorm: in.Storm}
	if err := in.Policy.Validate(); err != nil {
		return d.refuse(ReasonInvalidPolicy, 0, "policy is invalid, fencing nothing: %v", err)
	}
	if err := in.Bucket.Validate(); err != nil {
		return d.refuse(ReasonInvalidPolicy, 0, "policy is invalid, fencing nothing: %v", err)
	}
	if len(in.Nodes) == 0 {
		return d.refuse(ReasonNoNodes, 0, "the controller observes no node, so it cannot tell a dead node from a blind controller")
	}
	v := observe(in)
	breached, limit := stormLimit(in.Policy, v.total, v.unhealthy)
	d.NewStorm = nextStorm(in.Storm, breached, in.Now)
	if r, ok := checkCandidate(in, v); !ok {
		return d.refuse(r.Reason, 0, "%s", r.Why)
	}
	if in.Attempts >= in.Policy.MaxAttempts {
		d = d.refuse(ReasonMaxAttemptsReached, 0, "%d fencing attempts made, maxAttempts is %d", in.Attempts, in.Policy.MaxAttempts)
		d.Final = true
		return d
	}
	if allFullyDisrupted(v.zones) {
		return d.refuse(ReasonAllZonesFullyDisrupted, 0, "no zone has a healthy node (%d of %d nodes unhealthy): the control plane or the network is the likelier fault, fencing nothing", v.unhealthy, v.total)
	}
	if r, ok := checkStorm(in, d.NewStorm, breached, limit); !ok {
		return d.refuse(r.Reason, r.RetryAfter, "%s", r.Why)
	}
	return admitAtRate(in, v, d)
}

// admitAtRate applies rules 5 to 8.
func admitAtRate(in Input, v view, d Decision) Decision {
	zone := v.zones[in.Candidate.Zone]
	qps, burst := in.Bucket.QPS, in.Bucket.Burst
	if zone.State == PartialDisruption {
		z := in.Policy.Zones
		if zone.Size <= z.LargeClusterSize || z.PartialDisruptionRate == 0 {
			return d.refuse(ReasonZonePartialDisruption, 0, "zone %q is partially disrupted (%d of %d nodes unhealthy, threshold %v) and its rate is 0 (%d nodes, largeClusterSize %d, partialDisruptionRate %v)",
				in.Candidate.Zone, zone.Unhealthy, zone.Size, z.UnhealthyZoneThreshold, zone.Size, z.LargeClusterSize, z.PartialDisruptionRate)
		}
		qps, burst = min(qps, z.PartialDisruptionRate), 1
	}
	if v.fencingOthers >= in.Policy.MaxConcurrentFencing {
		return d.refuse(ReasonMaxConcurrentFencing, 0, "%d other nodes are being fenced, maxConcurrentFencing is %d", v.fencingOthers, in.Policy.MaxConcurrentFencing)
	}
	b, ok, wait := in.Bucket.take(in.Now, qps, burst)
	d.NewBucket = b
	if !ok {
		return d.refuse(ReasonRateLimited, wait, "fence rate limit reached (%v per second, burst %d); next token in %s", qps, burst, wait)
	}
	d.Admit, d.Reason = true, ReasonAdmitted
	d.Why = fmt.Sprintf("%d of %d nodes unhealthy, zone %q %s, %d other fences in progress", v.unhealthy, v.total, in.Candidate.Zone, zone.State, v.fencingOthers)
	return d
}

// checkCandidate applies the candidate part of rule 1.
func checkCandidate(in Input, v view) (Decision, bool) {
	c := in.Candidate
	switch {
	case !v.found:
		return Decision{Reason: ReasonCandidateNotObserved, Why: fmt.Sprintf("node %q is not among the %d observed nodes", c.Name, v.total)}, false
	case v.cand.Zone != c.Zone:
		return Decision{Reason: ReasonCandidateNotObserved, Why: fmt.Sprintf("node %q is observed in zone %q, not %q: the view is inconsistent", c.Name, v.cand.Zone, c.Zone)}, false
	case v.cand.Healthy:
		return Decision{Reason: ReasonCandidateHealthy, Why: fmt.Sprintf("node %q is healthy in the controller's view", c.Name)}, false
	}
	return Decision{}, true
}

// nextStorm is the storm state after a call that saw the limit breached or
// not.
func nextStorm(s Storm, breached bool, now time.Time) Storm {
	switch {
	case breached && !s.Active:
		s.Active, s.Since = true, now
	case !breached && s.Active:
		s.Active, s.Since, s.LastExit = false, time.Time{}, now
	}
	return s
}

// checkStorm applies rule 4 with the storm state after this call.
func checkStorm(in Input, s Storm, breached bool, limit string) (Decision, bool) {
	if breached {
		return Decision{Reason: ReasonStormActive, Why: fmt.Sprintf("storm since %s: %s; fencing nothing until it clears, then for cooldown %s", s.Since.UTC().Format(time.RFC3339), limit, in.Policy.Cooldown)}, false
	}
	if s.LastExit.IsZero() {
		return Decision{}, true
	}
	if left := s.LastExit.Add(in.Policy.Cooldown).Sub(in.Now); left > 0 {
		return Decision{Reason: ReasonStormCooldownActive, RetryAfter: left, Why: fmt.Sprintf("storm ended at %s; cooldown %s has %s left", s.LastExit.UTC().Format(time.RFC3339), in.Policy.Cooldown, left)}, false
	}
	return Decision{}, true
}

// refuse returns d refused for the reason.
func (d Decision) refuse(reason string, retry time.Duration, format string, args ...any) Decision {
	d.Admit, d.Reason, d.RetryAfter = false, reason, retry
	d.Why = fmt.Sprintf(format, args...)
	return d
}
