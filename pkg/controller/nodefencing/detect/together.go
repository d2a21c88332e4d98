package detect

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Nodes that stop together (a network or API server fault) stopped renewing
// at the same moment, but their last renewals are spread over one renew
// interval: the first of them goes stale up to an interval before the last.
// Judged at that first moment, the others still look healthy, and the storm
// guard would let the first be fenced. Two rules close that window (see
// Suspect and SettleDelay): whoever missed a renewal counts as unhealthy in
// the storm guard's view, and a candidate of a stale Lease waits a little
// before it is admitted, until every node that stopped with it has missed
// one.

// suspectFactor is the Lease age, in renew intervals, at which a node has
// missed a renewal: a quarter interval past one interval, more than a
// healthy kubelet's renewal latency.
const suspectFactor = 1.25

// settleFactor is SettleDelay in renew intervals: with it, a node that
// stopped at the same moment as a candidate is at least 1.5 intervals old
// when the candidate is admitted, a quarter interval past suspectFactor.
const settleFactor = 0.5

// RenewInterval is the kubelet's renew interval for the Lease: RenewFraction
// of its duration (DefaultLeaseDuration when it states none).
func RenewInterval(lease *coordinationv1.Lease) time.Duration {
	d := DefaultLeaseDuration
	if lease != nil && lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return time.Duration(RenewFraction * float64(d))
}

// Suspect reports whether the node's kubelet missed a renewal: its last
// renewal was observed at least 1.25 renew intervals ago. It never makes a
// candidate; the storm guard counts a suspect node as unhealthy, so that
// nodes that stopped together are seen together. A missing Lease, or one
// without renewTime, is not suspect (absence is not evidence), nor is one
// without an observation.
func Suspect(renewal Renewal, now time.Time) bool {
	renewed, ok := renewal.renewedAt(now)
	if !ok {
		return false
	}
	return now.Sub(renewed) >= SuspectAfter(renewal.Lease)
}

// SuspectAfter is the Lease age at which its node has missed a renewal:
// 1.25 renew intervals (12.5 s with the default 40 s Lease).
func SuspectAfter(lease *coordinationv1.Lease) time.Duration {
	return time.Duration(suspectFactor * float64(RenewInterval(lease)))
}

// SettleDelay is how long a candidate of a stale Lease (ReasonLeaseExpired)
// waits after it became one before the storm guard judges it: half a renew
// interval, after which every node that stopped renewing at the same moment
// is Suspect. It costs 5 s with the default 40 s Lease.
func SettleDelay(lease *coordinationv1.Lease) time.Duration {
	return time.Duration(settleFactor * float64(RenewInterval(lease)))
}
