// Package detect decides, for one Node, whether it is a fencing candidate:
// a node that looks dead enough that powering it off is the right next step
// (the storm guard, package stormguard, then decides whether the cluster as
// a whole allows it). It is pure: no I/O, the time is passed in.
//
// A node is a candidate when its kubelet's Lease has not been renewed for
// Rules.LeaseStaleAfter, when it missed a renewal and its fence devices
// read Off in a power check asked for that renewal (Rules.PowerCheck), or
// when one of the optional condition rules holds for its duration. Never a
// candidate: a node the policy does not select, a node labelled
// ExcludeLabel, and a node that reports Ready=True while its Lease is not
// stale and its power was not read Off, whatever a condition rule says (see
// Unhealthy).
//
// Clocks: spec.renewTime of a node Lease is written by the kubelet from the
// node's own clock, so it is never compared with the controller's. A Lease
// is judged by when the controller observed its renewal (Renewal,
// package renewals), as kube-controller-manager's node lifecycle controller
// judges its probe timestamps: a node whose clock runs behind or ahead is
// detected exactly as one whose clock agrees.
package detect

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

const (
	// ExcludeLabel on a Node (any value) keeps it out of fencing whatever
	// the policy selects.
	ExcludeLabel = names.Domain + "/exclude-from-fencing"

	// ExternalDetectionLabel on a Node (its value names the detector, e.g.
	// "medik8s-nhc") says another detector owns the node's detection:
	// node-fencing neither creates a FencingRequest for it nor checks its
	// power on a missed renewal. The detector's FencelineRemediation
	// (remediation controller) and a manual request still fence it, and
	// node-fencing drives their requests as any other.
	ExternalDetectionLabel = names.Domain + "/external-detection"

	// DefaultLeaseStaleAfter is the Lease age at which a node becomes a
	// candidate when Rules.LeaseStaleAfter is zero: two renew intervals of
	// a kubelet with the default nodeLeaseDurationSeconds.
	DefaultLeaseStaleAfter = 20 * time.Second

	// DefaultLeaseDuration is the kubelet's default nodeLeaseDurationSeconds,
	// assumed for a Lease that does not state its duration.
	DefaultLeaseDuration = 40 * time.Second

	// RenewFraction is the part of its lease duration after which the
	// kubelet renews its Lease (upstream's nodeLeaseRenewIntervalFraction):
	// every 10 s with the default 40 s duration.
	RenewFraction = 0.25

	// ReasonLeaseExpired is Verdict.Reason for a stale Lease.
	ReasonLeaseExpired = "LeaseExpired"
	// ReasonPowerOffObserved is Verdict.Reason for a node that missed a
	// renewal and whose fence devices then read Off.
	ReasonPowerOffObserved = "PowerOffObserved"
	// ReasonConditionRulePrefix prefixes Verdict.Reason for a condition
	// rule, followed by the condition type (ConditionRule:Ready).
	ReasonConditionRulePrefix = "ConditionRule:"
)

// ConditionRule is an NHC-style unhealthy condition: the node condition of
// Type has had Status for at least Duration, measured from the condition's
// lastTransitionTime.
type ConditionRule struct {
	Type     v1.NodeConditionType
	Status   v1.ConditionStatus
	Duration time.Duration
}

// Rules are the detection fields of a FencePolicy.
type Rules struct {
	// Selector picks the nodes the policy covers. A nil Selector selects
	// nothing (as metav1.LabelSelectorAsSelector of a nil selector):
	// forgetting it must not make the whole cluster fenceable.
	Selector labels.Selector
	// LeaseStaleAfter is the Lease age that makes a node a candidate; zero
	// means DefaultLeaseStaleAfter. It is raised to MinLeaseStaleAfter of
	// the node's Lease when set lower (see MinLeaseStaleAfter).
	LeaseStaleAfter time.Duration
	// Conditions are OR-ed; any one that holds makes a candidate.
	Conditions []ConditionRule
	// PowerCheck: a node that missed a renewal has its fence devices read
	// (Verdict.CheckPower), and one they read Off for that renewal
	// (Renewal.PowerOff) is a candidate.
	PowerCheck bool
}

// Verdict is the outcome of Unhealthy.
type Verdict struct {
	Candidate bool
	// Reason is ReasonLeaseExpired or ReasonConditionRulePrefix+type for a
	// candidate, empty otherwise.
	Reason string
	// Message says why, for Events and logs, candidate or not.
	Message string
	// Since is when the node became a candidate: the last renewal plus the
	// stale age, or the condition's transition plus the rule's duration.
	Since time.Time
	// RecheckAfter, for a node that is not a candidate, is how long until
	// it becomes one if nothing changes (its Lease stays unrenewed, a
	// matching condition keeps its status), so that the controller can
	// requeue instead of polling. Zero: no change is pending; only an
	// update of the Node or Lease can make it a candidate.
	RecheckAfter time.Duration
	// CheckPower, for a node that is not a candidate, says that it missed
	// its Lease renewal under Rules.PowerCheck: its fence devices are to be
	// read for that renewal (PowerCheckToken).
	CheckPower bool
}

// Renewal is a node's kubelet Lease as the controller observed it.
type Renewal struct {
	// Lease is the node's Lease in kube-node-lease, nil when there is none;
	// its duration sets the renew interval.
	Lease *coordinationv1.Lease
	// ObservedAt is when the controller, on its own clock, first saw the
	// Lease's current renewal (renewals.Observation.ObservedAt). Zero with
	// a Lease counts as now: without an observation the Lease looks just
	// renewed, the safe reading (no node is a candidate for want of one).
	ObservedAt time.Time
	// PowerOff: every fence device of the node read Off in a power check
	// asked for this renewal (PowerCheckToken of Lease), read after the ask
	// was made, so after the renewal was missed.
	PowerOff bool
}

// PowerCheckToken names the renewal of lease that a power check is asked
// for: a new renewal (or Lease) is another token, so an answer about an
// earlier silence never counts for a later one. renewTime serves only as a
// marker here, never as a time.
func PowerCheckToken(lease *coordinationv1.Lease) string {
	if lease == nil || lease.Spec.RenewTime == nil {
		return ""
	}
	return fmt.Sprintf("%s/%d", lease.UID, lease.Spec.RenewTime.UnixNano())
}

// Snapshot is the Renewal of a reader without observation history (the
// kubectl plugin's explain): the Lease judged by its renewTime, that is by
// the node's clock, capped at now so that a renewTime in the future counts
// as renewed now. The controllers never use it.
func Snapshot(lease *coordinationv1.Lease, now time.Time) Renewal {
	r := Renewal{Lease: lease}
	if lease != nil && lease.Spec.RenewTime != nil {
		r.ObservedAt = lease.Spec.RenewTime.Time
		if r.ObservedAt.After(now) {
			r.ObservedAt = now
		}
	}
	return r
}

// renewedAt is when the renewal counts as made: ObservedAt, or now when
// there is no observation; false without a renewed Lease.
func (r Renewal) renewedAt(now time.Time) (time.Time, bool) {
	l := r.Lease
	if l == nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.IsZero() {
		return time.Time{}, false
	}
	if r.ObservedAt.IsZero() || r.ObservedAt.After(now) {
		return now, true
	}
	return r.ObservedAt, true
}

// MinLeaseStaleAfter is the smallest stale age that Unhealthy uses for the
// Lease: two renew intervals of its kubelet (20 s for the default 40 s
// lease duration; a Lease without a duration counts as the default). One
// interval is not enough: a kubelet renews every interval plus the latency
// of its update, so the age of a healthy node's Lease routinely reaches
// just past one interval, and a single late renewal (a garbage-collection
// pause, an API server restart, a leader change, a dropped connection) must
// not fence a node. Two intervals mean at least one renewal was missed
// entirely and the next is late too.
func MinLeaseStaleAfter(lease *coordinationv1.Lease) time.Duration {
	return 2 * RenewInterval(lease)
}

// Unhealthy is the single place that states when a node is a fencing
// candidate; the controller calls it again on fresh data right before it
// creates a fencing request. renewal is the node's Lease with when the
// controller observed its last renewal.
//
// Invariants:
//   - a nil node, a node the selector does not match and a node labelled
//     ExcludeLabel are never candidates;
//   - a missing Lease (a kubelet that does not use one, a node whose Lease
//     is not created yet) or one without renewTime is not stale: absence is
//     not evidence of death, and the condition rules still apply;
//   - the Lease's age is counted from when the controller observed its
//     renewal, never from renewTime: a node's clock, behind or ahead, does
//     not change the verdict; a renewal observed less than the stale age
//     ago is not stale, so a heartbeat gap shorter than the threshold never
//     makes a candidate; at exactly the stale age it is;
//   - under Rules.PowerCheck, a node that missed a renewal (Suspect) and
//     whose fence devices read Off for it (Renewal.PowerOff) is a
//     candidate, Ready or not: a machine without power writes nothing, and
//     its Ready condition is only the API server's memory of it;
//   - a node whose Ready condition is True while its Lease is not stale is
//     never a candidate otherwise, whatever a condition rule says: its kubelet is
//     alive and serving, its pods run and nothing waits for their volumes,
//     so there is no failover to speed up and powering it off would only
//     turn a degraded node into a dead one (that is remediation, not
//     fencing). It also keeps a careless rule (MemoryPressure=True for 0s)
//     from fencing a whole fleet of live nodes;
//   - a condition rule needs the condition's lastTransitionTime: without
//     one the duration cannot be proven and the rule does not hold.
func Unhealthy(node *v1.Node, renewal Renewal, rules Rules, now time.Time) Verdict {
	if v, out := outOfScope(node, rules); out {
		return v
	}
	renewed, hasLease := renewal.renewedAt(now)
	staleAt := renewed.Add(staleAfter(renewal.Lease, rules))
	if hasLease && !now.Before(staleAt) {
		return Verdict{Candidate: true, Reason: ReasonLeaseExpired, Since: staleAt,
			Message: fmt.Sprintf("Lease renewal last observed at %s (renewTime %s by the node's clock), stale since %s",
				renewed.UTC().Format(time.RFC3339), renewal.Lease.Spec.RenewTime.UTC().Format(time.RFC3339), staleAt.UTC().Format(time.RFC3339))}
	}
	recheck := until(hasLease, staleAt, now)
	checkPower := false
	if rules.PowerCheck && hasLease {
		suspectAt := renewed.Add(SuspectAfter(renewal.Lease))
		switch {
		case now.Before(suspectAt):
			recheck = earliest(recheck, suspectAt.Sub(now))
		case renewal.PowerOff:
			return Verdict{Candidate: true, Reason: ReasonPowerOffObserved, Since: suspectAt,
				Message: fmt.Sprintf("Lease renewal last observed at %s, missed since %s, and every fence device read the power Off since",
					renewed.UTC().Format(time.RFC3339), suspectAt.UTC().Format(time.RFC3339))}
		default:
			checkPower = true
		}
	}
	if nodeutil.IsReady(node) {
		why := "node is Ready and has no Lease"
		if hasLease {
			why = "node is Ready and its Lease is fresh"
		}
		return Verdict{Message: why, RecheckAfter: recheck, CheckPower: checkPower}
	}
	for _, r := range rules.Conditions {
		at, matches := ruleHoldsAt(node, r)
		if !matches {
			continue
		}
		if !now.Before(at) {
			return Verdict{Candidate: true, Reason: ReasonConditionRulePrefix + string(r.Type), Since: at,
				Message: fmt.Sprintf("condition %s=%s since %s, at least %s", r.Type, r.Status, at.Add(-r.Duration).UTC().Format(time.RFC3339), r.Duration)}
		}
		recheck = earliest(recheck, at.Sub(now))
	}
	return Verdict{Message: "Lease not stale and no condition rule holds", RecheckAfter: recheck, CheckPower: checkPower}
}

// outOfScope reports nodes that are never candidates by selection.
func outOfScope(node *v1.Node, rules Rules) (Verdict, bool) {
	switch {
	case node == nil:
		return Verdict{Message: "node does not exist"}, true
	case hasLabel(node, ExcludeLabel):
		return Verdict{Message: "node is labelled " + ExcludeLabel}, true
	case rules.Selector == nil:
		return Verdict{Message: "policy has no node selector"}, true
	case !rules.Selector.Matches(labels.Set(node.Labels)):
		return Verdict{Message: "node is not selected by the policy"}, true
	}
	return Verdict{}, false
}

func hasLabel(node *v1.Node, key string) bool {
	_, ok := node.Labels[key]
	return ok
}

// staleAfter is the Lease age that makes a candidate: the policy's,
// DefaultLeaseStaleAfter when it sets none, at least MinLeaseStaleAfter.
func staleAfter(lease *coordinationv1.Lease, rules Rules) time.Duration {
	after := rules.LeaseStaleAfter
	if after == 0 {
		after = DefaultLeaseStaleAfter
	}
	return max(after, MinLeaseStaleAfter(lease))
}

// ruleHoldsAt returns when the rule holds (transition plus duration), and
// false when the node has no condition of the type with the status, or
// the condition has no lastTransitionTime.
func ruleHoldsAt(node *v1.Node, r ConditionRule) (time.Time, bool) {
	for _, c := range node.Status.Conditions {
		if c.Type != r.Type {
			continue
		}
		if c.Status != r.Status || c.LastTransitionTime.IsZero() {
			return time.Time{}, false
		}
		return c.LastTransitionTime.Add(r.Duration), true
	}
	return time.Time{}, false
}

// until is the time left before at, or zero when there is no deadline.
func until(has bool, at, now time.Time) time.Duration {
	if !has {
		return 0
	}
	return at.Sub(now)
}

// earliest is the smaller positive of two recheck delays (zero: none).
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
