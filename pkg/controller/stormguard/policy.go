package stormguard

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// FullDisruptionAction is what the guard does when every zone is fully
// disrupted (upstream's "master disruption mode").
type FullDisruptionAction string

// FullDisruptionStop fences nothing. It is the only action: every value,
// the zero value included, behaves as Stop, because fencing while the
// controller sees no healthy node would act on a view that a control-plane
// or network fault explains better than the death of every node.
const FullDisruptionStop FullDisruptionAction = "Stop"

// ZoneRules are the node lifecycle controller's zone parameters, under the
// names of its flags.
type ZoneRules struct {
	// ZoneLabel is the node label that names a node's zone; the caller
	// reads it with ZoneOf to fill NodeHealth.Zone (Admit sees zones only
	// there).
	ZoneLabel string
	// UnhealthyZoneThreshold is --unhealthy-zone-threshold (0.55): the
	// unhealthy fraction, with more than two unhealthy nodes, that puts a
	// zone in PartialDisruption. It must be in (0, 1].
	UnhealthyZoneThreshold float64
	// LargeClusterSize is --large-cluster-size-threshold (50): a zone of
	// at most this many nodes fences nothing while partially disrupted.
	LargeClusterSize int
	// PartialDisruptionRate is --secondary-node-eviction-rate: the fence
	// rate, per second, of a partially disrupted zone larger than
	// LargeClusterSize (upstream 0.01; 0 stops such zones too).
	PartialDisruptionRate float64
}

// Policy is the stormGuard part of a FencePolicy, as plain values.
type Policy struct {
	// MaxConcurrentFencing bounds the nodes being fenced at once
	// (at least 1).
	MaxConcurrentFencing int
	// MaxUnhealthy and MinHealthy are NHC's, count or percent of the
	// observed nodes; exactly one is set. More than MaxUnhealthy unhealthy
	// nodes (percent rounded down), or fewer than MinHealthy healthy ones
	// (percent rounded up), is a storm: nothing is fenced.
	MaxUnhealthy *intstr.IntOrString
	MinHealthy   *intstr.IntOrString
	Zones        ZoneRules
	// FullDisruption is always Stop (see FullDisruptionStop).
	FullDisruption FullDisruptionAction
	// Cooldown is NHC's stormCooldownDuration: after a storm ends, no new
	// fence starts for this long, so that late status updates of nodes
	// that are recovering do not fence them.
	Cooldown time.Duration
	// MaxAttempts bounds the fencing attempts of one request (Pacemaker's
	// fencing-max-attempts); at least 1.
	MaxAttempts int
}

// Validate reports every field that makes the policy unusable; Admit fences
// nothing under such a policy. A missing limit is an error rather than
// "unlimited": a storm guard that fails open is no guard.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxConcurrentFencing < 1 {
		errs = append(errs, fmt.Errorf("maxConcurrentFencing is %d, must be at least 1", p.MaxConcurrentFencing))
	}
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("maxAttempts is %d, must be at least 1", p.MaxAttempts))
	}
	switch {
	case (p.MaxUnhealthy == nil) == (p.MinHealthy == nil):
		errs = append(errs, errors.New("exactly one of maxUnhealthy and minHealthy must be set"))
	case p.MaxUnhealthy != nil:
		if _, err := scaled(p.MaxUnhealthy, 100, false); err != nil {
			errs = append(errs, fmt.Errorf("maxUnhealthy: %w", err))
		}
	default:
		if _, err := scaled(p.MinHealthy, 100, true); err != nil {
			errs = append(errs, fmt.Errorf("minHealthy: %w", err))
		}
	}
	z := p.Zones
	if !(z.UnhealthyZoneThreshold > 0 && z.UnhealthyZoneThreshold <= 1) {
		errs = append(errs, fmt.Errorf("unhealthyZoneThreshold is %v, must be in (0, 1]", z.UnhealthyZoneThreshold))
	}
	if z.LargeClusterSize < 0 {
		errs = append(errs, fmt.Errorf("largeClusterSize is %d, must not be negative", z.LargeClusterSize))
	}
	if !(z.PartialDisruptionRate >= 0) {
		errs = append(errs, fmt.Errorf("partialDisruptionRate is %v, must not be negative", z.PartialDisruptionRate))
	}
	if p.Cooldown < 0 {
		errs = append(errs, fmt.Errorf("cooldown is %s, must not be negative", p.Cooldown))
	}
	return errors.Join(errs...)
}

// Validate reports a rate the bucket cannot enforce.
func (b Bucket) Validate() error {
	var errs []error
	if !(b.QPS > 0) {
		errs = append(errs, fmt.Errorf("rate qps is %v, must be positive", b.QPS))
	}
	if b.Burst < 1 {
		errs = append(errs, fmt.Errorf("rate burst is %d, must be at least 1", b.Burst))
	}
	return errors.Join(errs...)
}

// scaled is intstr's count-or-percent of total, refusing negatives
// (Validate scales against 100, so that a negative percent shows).
func scaled(v *intstr.IntOrString, total int, roundUp bool) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, roundUp)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", v.String(), err)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", v.String())
	}
	return n, nil
}

// stormLimit says whether the observed counts breach the policy's
// maxUnhealthy or minHealthy, and describes the limit.
func stormLimit(p Policy, total, unhealthy int) (breached bool, limit string) {
	if p.MaxUnhealthy != nil {
		n, _ := scaled(p.MaxUnhealthy, total, false)
		return unhealthy > n, fmt.Sprintf("%d of %d nodes are unhealthy, maxUnhealthy %s allows %d", unhealthy, total, p.MaxUnhealthy.String(), n)
	}
	n, _ := scaled(p.MinHealthy, total, true)
	return total-unhealthy < n, fmt.Sprintf("%d of %d nodes are healthy, minHealthy %s requires %d", total-unhealthy, total, p.MinHealthy.String(), n)
}
