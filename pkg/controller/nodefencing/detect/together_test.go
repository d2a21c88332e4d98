package detect

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenceline.io/fenceline/internal/testobj"
)

func leaseRenewed(at time.Time, seconds int32) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(at)
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &rt}}
	if seconds > 0 {
		l.Spec.LeaseDurationSeconds = &seconds
	}
	return l
}

// observed is the Lease with its renewal observed at its renewTime: the
// node's clock agrees with the controller's and the watch is instant.
func observed(l *coordinationv1.Lease) Renewal {
	r := Renewal{Lease: l}
	if l != nil && l.Spec.RenewTime != nil {
		r.ObservedAt = l.Spec.RenewTime.Time
	}
	return r
}

func TestSuspect(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  bool
	}{
		{"no Lease", nil, false},
		{"no renewTime", &coordinationv1.Lease{}, false},
		{"renewed now", leaseRenewed(now, 40), false},
		{"one interval plus latency (10.5 s of 40 s)", leaseRenewed(now.Add(-10500*time.Millisecond), 40), false},
		{"just under 1.25 intervals", leaseRenewed(now.Add(-12499*time.Millisecond), 40), false},
		{"1.25 intervals: missed a renewal", leaseRenewed(now.Add(-12500*time.Millisecond), 40), true},
		{"default duration when unset", leaseRenewed(now.Add(-13*time.Second), 0), true},
		{"short Lease of 4 s: 1.25 s", leaseRenewed(now.Add(-1250*time.Millisecond), 4), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Suspect(observed(tc.lease), now); got != tc.want {
				t.Errorf("Suspect = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNodesStoppingTogetherAreSeenTogether: nodes that stop renewing at the
// same moment, whatever the phase of their renew cycle, are all Suspect or
// candidates once the first candidate has waited SettleDelay; and a node
// renewing normally (latency up to a quarter interval) never is.
func TestNodesStoppingTogetherAreSeenTogether(t *testing.T) {
	stop := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, seconds := range []int32{4, 40} {
		interval := RenewInterval(leaseRenewed(stop, seconds))
		// The first candidate renewed a whole interval before the stop.
		first := leaseRenewed(stop.Add(-interval), seconds)
		// It is a candidate at the smallest stale age, two intervals after
		// its renewal, and is judged SettleDelay later.
		rules := Rules{Selector: labels.Everything(), LeaseStaleAfter: time.Nanosecond}
		v := Unhealthy(testobj.Node("n1"), observed(first), rules, stop.Add(interval))
		if !v.Candidate || !v.Since.Equal(stop.Add(interval)) {
			t.Fatalf("lease %ds: first node's verdict %+v, want a candidate since %s", seconds, v, stop.Add(interval))
		}
		admitAt := v.Since.Add(SettleDelay(first))
		for _, lastRenewal := range []time.Duration{0, interval / 4, interval / 2, interval} {
			other := leaseRenewed(stop.Add(-lastRenewal), seconds)
			if !Suspect(observed(other), admitAt) {
				t.Errorf("lease %ds: a node that renewed %s before the stop is not Suspect when the first candidate is admitted", seconds, lastRenewal)
			}
		}
		healthy := leaseRenewed(admitAt.Add(-interval-interval/5), seconds)
		if Suspect(observed(healthy), admitAt) {
			t.Errorf("lease %ds: a node renewing every interval with latency is Suspect", seconds)
		}
	}
}
