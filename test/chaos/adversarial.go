package chaos

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// Lie is when a BMC lied (Plan.LyingBMC): from From until Until
// (zero: to the end of the episode).
type Lie struct {
	From, Until time.Time
}

// covers reports whether the BMC was lying at t.
func (l Lie) covers(t time.Time) bool {
	return !l.From.After(t) && (l.Until.IsZero() || !t.After(l.Until))
}

// startSkews puts the plan's clocks off from before the failure to the end
// of the episode: a node's Lease, or the attacher's heartbeat, renewed
// with a renewTime 30 s off. on are the nodes the workload runs on.
func (e *episode) startSkews(on []string) error {
	for _, s := range e.p.Skews {
		var (
			skew *world.LeaseSkew
			err  error
			whom string
		)
		switch s.Of {
		case SkewFailedNode, SkewHealthyNode:
			whom = e.failed[0]
			if s.Of == SkewHealthyNode {
				whom = e.healthyNode(on)
			}
			e.skewed[whom] = s.By
			skew, err = e.w.SkewNodeLease(e.ctx, whom, s.By)
		case SkewAttacher:
			d := e.skewedAttacher()
			whom = "fenceline-attacher's heartbeat"
			if e.p.TwoDrivers {
				whom = "the heartbeat of " + d + "'s fenceline-attacher"
			}
			skew, err = e.w.SkewAttacherHeartbeatOf(e.ctx, d, s.By)
		default:
			err = fmt.Errorf("unknown skew target %q", s.Of)
		}
		if err != nil {
			return fmt.Errorf("skew %s: %w", s, err)
		}
		e.t.Cleanup(skew.Stop)
		e.skews = append(e.skews, skew)
		e.timeline.Add(time.Now(), "clock of %s runs %+ds off: every renewTime it writes", whom, int(s.By.Seconds()))
	}
	return nil
}

// skewedAttacher is the driver whose attacher an attacher skew hits: the
// safe-detach one (its heartbeat is quarantine's evidence), else the
// first.
func (e *episode) skewedAttacher() string {
	for _, d := range e.p.Drivers() {
		if e.p.SafeDetachDriver(d) {
			return d
		}
	}
	return world.DriverName
}

// healthyNode is the node a healthy-node skew hits: the first node of the
// workload the episode does not fail (its pods are the ones a wrong
// verdict would delete), else the first node it does not fail.
func (e *episode) healthyNode(on []string) string {
	for _, n := range append(slices.Clone(on), e.w.Nodes...) {
		if !slices.Contains(e.failed, n) {
			return n
		}
	}
	return ""
}

// caughtLiar reports whether n is a node whose BMC lied and that node
// fencing marked LyingFence: it stays fenced (out of service, its fencing
// taints) on purpose, and convergence does not wait for it to be
// untainted.
func (e *episode) caughtLiar(n *corev1.Node) bool {
	e.mu.Lock()
	_, lied := e.lies[n.Name]
	e.mu.Unlock()
	if !lied {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeConditionType(names.LyingFenceCondition) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// lieOutcome counts the nodes fenced while their BMC lied (FencingComplete
// turned True during the lie with no power cut in the log), and those of
// them node fencing marked LyingFence afterwards.
func lieOutcome(f Facts) (believed, caught int) {
	for node, l := range f.LyingBMC {
		fooled, marked := false, false
		states := slices.DeleteFunc(slices.Clone(f.Nodes), func(s NodeState) bool { return s.Name != node })
		slices.SortStableFunc(states, func(a, b NodeState) int { return compareRV(a.RV, b.RV) })
		for _, s := range states {
			fooled = fooled || (s.FencingComplete && l.covers(s.Seen) && !offAround(f.Power[node], s.Seen))
			marked = marked || (fooled && s.LyingFence)
		}
		if fooled {
			believed++
		}
		if marked {
			caught++
		}
	}
	return believed, caught
}

// skewRewrites is how many renewals the episode's skews rewrote.
func (e *episode) skewRewrites() int {
	n := 0
	for _, s := range e.skews {
		n += s.Rewrites()
	}
	return n
}
