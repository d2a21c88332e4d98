package detect

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenceline.io/fenceline/internal/testobj"
)

func TestUnhealthy(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	all := Rules{Selector: labels.Everything()}
	unknown20 := Rules{Selector: labels.Everything(), Conditions: []ConditionRule{{Type: v1.NodeReady, Status: v1.ConditionUnknown, Duration: 20 * time.Second}}}
	npd := Rules{Selector: labels.Everything(), Conditions: []ConditionRule{{Type: "KernelDeadlock", Status: v1.ConditionTrue, Duration: 0}}}
	workers := Rules{Selector: labels.SelectorFromSet(labels.Set{"role": "worker"})}
	down := testobj.UnknownSince(ago(time.Minute))

	type want struct {
		candidate bool
		reason    string
		since     time.Time
		recheck   time.Duration
	}
	tests := []struct {
		name  string
		node  *v1.Node
		lease *coordinationv1.Lease
		rules Rules
		want  want
	}{
		// The Lease rule and its boundary (default 20 s).
		{"lease renewed just now", testobj.Node("n1"), testobj.Lease("n1", now), all, want{recheck: 20 * time.Second}},
		{"lease renewed 19 s ago (1 s before the threshold): not stale", testobj.Node("n1", down), testobj.Lease("n1", ago(19*time.Second)), all, want{recheck: time.Second}},
		{"lease renewed 1 ns short of the threshold: not stale", testobj.Node("n1", down), testobj.Lease("n1", ago(20*time.Second-1)), all, want{recheck: 1}},
		{"lease renewed exactly 20 s ago: stale", testobj.Node("n1", down), testobj.Lease("n1", ago(20*time.Second)), all, want{true, ReasonLeaseExpired, now, 0}},
		{"lease renewed a minute ago", testobj.Node("n1", down), testobj.Lease("n1", ago(time.Minute)), all, want{true, ReasonLeaseExpired, ago(40 * time.Second), 0}},
		{"stale lease while the node controller still says Ready (its grace period is longer)", testobj.Node("n1", testobj.ReadySince(ago(time.Hour))), testobj.Lease("n1", ago(30*time.Second)), all, want{true, ReasonLeaseExpired, ago(10 * time.Second), 0}},
		{"observation in the future (the controller's clock went back): counts as now", testobj.Node("n1", down), testobj.Lease("n1", now.Add(5*time.Second)), all, want{recheck: 20 * time.Second}},

		// Stale age: configured, and the two-renewal floor.
		{"configured 30 s: 25 s is fresh", testobj.Node("n1", down), testobj.Lease("n1", ago(25*time.Second)), Rules{Selector: labels.Everything(), LeaseStaleAfter: 30 * time.Second}, want{recheck: 5 * time.Second}},
		{"configured 5 s is raised to two renewals (20 s)", testobj.Node("n1", down), testobj.Lease("n1", ago(15*time.Second)), Rules{Selector: labels.Everything(), LeaseStaleAfter: 5 * time.Second}, want{recheck: 5 * time.Second}},
		{"kubelet with a 100 s lease renews every 25 s: 20 s raised to 50 s", testobj.Node("n1", down), testobj.Lease("n1", ago(45*time.Second), testobj.LeaseDuration(100*time.Second)), all, want{recheck: 5 * time.Second}},
		{"kubelet with a 100 s lease, 50 s silent: stale", testobj.Node("n1", down), testobj.Lease("n1", ago(50*time.Second), testobj.LeaseDuration(100*time.Second)), all, want{true, ReasonLeaseExpired, now, 0}},

		// A missing Lease is not a reason by itself.
		{"no lease, NotReady, no condition rule", testobj.Node("n1", down), nil, all, want{}},
		{"no lease, Ready", testobj.Node("n1"), nil, unknown20, want{}},
		{"lease without renewTime", testobj.Node("n1", down), &coordinationv1.Lease{}, all, want{}},
		{"no lease, Ready=Unknown for a minute: condition rule", testobj.Node("n1", down), nil, unknown20, want{true, "ConditionRule:Ready", ago(40 * time.Second), 0}},

		// Condition rules.
		{"Ready=Unknown for 19 s: rule not yet", testobj.Node("n1", testobj.UnknownSince(ago(19*time.Second))), testobj.Lease("n1", ago(5*time.Second)), unknown20, want{recheck: time.Second}},
		{"Ready=Unknown for exactly 20 s: rule holds", testobj.Node("n1", testobj.UnknownSince(ago(20*time.Second))), testobj.Lease("n1", ago(5*time.Second)), unknown20, want{true, "ConditionRule:Ready", now, 0}},
		{"Ready=False does not match a rule for Unknown", testobj.Node("n1", testobj.NotReadySince(ago(time.Hour))), testobj.Lease("n1", ago(5*time.Second)), unknown20, want{recheck: 15 * time.Second}},
		{"lease and rule both hold: the Lease is reported", testobj.Node("n1", down), testobj.Lease("n1", ago(time.Minute)), unknown20, want{true, ReasonLeaseExpired, ago(40 * time.Second), 0}},
		{"recheck is the earlier of lease and rule", testobj.Node("n1", testobj.UnknownSince(ago(18*time.Second))), testobj.Lease("n1", ago(5*time.Second)), unknown20, want{recheck: 2 * time.Second}},
		{"condition without lastTransitionTime: not proven", testobj.Node("n1", testobj.NotReadySince(ago(time.Hour)), testobj.Condition("KernelDeadlock", v1.ConditionTrue)), testobj.Lease("n1", now), npd, want{recheck: 20 * time.Second}},
		{"NotReady with a fresh lease and an NPD condition: rule holds", testobj.Node("n1", testobj.NotReadySince(ago(time.Hour)), testobj.ConditionSince("KernelDeadlock", v1.ConditionTrue, ago(time.Second))), testobj.Lease("n1", now), npd, want{true, "ConditionRule:KernelDeadlock", ago(time.Second), 0}},

		// Ready and not stale: never a candidate, whatever a rule says.
		{"Ready, fresh lease, NPD condition holds: vetoed", testobj.Node("n1", testobj.ConditionSince("KernelDeadlock", v1.ConditionTrue, ago(time.Hour))), testobj.Lease("n1", ago(5*time.Second)), npd, want{recheck: 15 * time.Second}},
		{"Ready, no lease, NPD condition holds: vetoed", testobj.Node("n1", testobj.ConditionSince("KernelDeadlock", v1.ConditionTrue, ago(time.Hour))), nil, npd, want{}},

		// Selection.
		{"excluded by label, stale lease", testobj.Node("n1", down, testobj.Label(ExcludeLabel, "")), testobj.Lease("n1", ago(time.Hour)), all, want{}},
		{"not selected by the policy", testobj.Node("n1", down, testobj.Label("role", "db")), testobj.Lease("n1", ago(time.Hour)), workers, want{}},
		{"selected by the policy", testobj.Node("n1", down, testobj.Label("role", "worker")), testobj.Lease("n1", ago(time.Hour)), workers, want{true, ReasonLeaseExpired, ago(time.Hour - 20*time.Second), 0}},
		{"policy without a selector selects nothing", testobj.Node("n1", down), testobj.Lease("n1", ago(time.Hour)), Rules{}, want{}},
		{"node deleted", nil, testobj.Lease("n1", ago(time.Hour)), all, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Unhealthy(tc.node, observed(tc.lease), tc.rules, now)
			if (want{got.Candidate, got.Reason, got.Since, got.RecheckAfter}) != tc.want || got.Message == "" {
				t.Errorf("Unhealthy() = %+v, want %+v with a message", got, tc.want)
			}
		})
	}
}

// TestFlappingNeverFences replays a kubelet whose renewals arrive late by
// up to just under the threshold: at no instant of the run is the node a
// candidate (invariant 8: heartbeat gaps shorter than leaseStaleAfter never
// produce a fencing request).
func TestFlappingNeverFences(t *testing.T) {
	rules := Rules{Selector: labels.Everything()}
	node := testobj.Node("n1", testobj.UnknownSince(testobj.Epoch))
	gaps := []time.Duration{10 * time.Second, 19 * time.Second, 3 * time.Second, 20*time.Second - time.Millisecond, 10 * time.Second}
	renew := testobj.Epoch
	for _, gap := range gaps {
		lease := testobj.Lease("n1", renew)
		for at := renew; at.Before(renew.Add(gap)); at = at.Add(100 * time.Millisecond) {
			if v := Unhealthy(node, observed(lease), rules, at); v.Candidate {
				t.Fatalf("gap %s: candidate at +%s: %+v", gap, at.Sub(renew), v)
			}
		}
		renew = renew.Add(gap)
	}
}

func TestMinLeaseStaleAfter(t *testing.T) {
	tests := []struct {
		lease *coordinationv1.Lease
		want  time.Duration
	}{
		{nil, 20 * time.Second},
		{testobj.Lease("n1", testobj.Epoch), 20 * time.Second},
		{testobj.Lease("n1", testobj.Epoch, testobj.LeaseDuration(40*time.Second)), 20 * time.Second},
		{testobj.Lease("n1", testobj.Epoch, testobj.LeaseDuration(100*time.Second)), 50 * time.Second},
		{testobj.Lease("n1", testobj.Epoch, testobj.LeaseDuration(0)), 20 * time.Second},
	}
	for _, tc := range tests {
		if got := MinLeaseStaleAfter(tc.lease); got != tc.want {
			t.Errorf("MinLeaseStaleAfter(%v) = %s, want %s", tc.lease, got, tc.want)
		}
	}
}

// TestUnhealthyIgnoresNodeClock: the verdict depends on when the controller
// observed the renewal, not on the renewTime the node's clock wrote. A
// healthy node whose clock runs 30 s behind (renewTime 30 s older than the
// renewal) is never a candidate; a dead one whose clock runs 30 s ahead is
// a candidate as soon as any other.
func TestUnhealthyIgnoresNodeClock(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	all := Rules{Selector: labels.Everything()}
	up := testobj.ReadySince(ago(time.Hour))
	down := testobj.UnknownSince(ago(time.Minute))
	tests := []struct {
		name      string
		node      *v1.Node
		renewTime time.Time // as the node's clock wrote it
		observed  time.Time // as the controller saw it; zero: no observation
		candidate bool
		since     time.Time
		recheck   time.Duration
	}{
		{"healthy, clock in step, renewal seen 5 s ago", testobj.Node("n1", up), ago(5 * time.Second), ago(5 * time.Second), false, time.Time{}, 15 * time.Second},
		{"healthy, clock 30 s behind, renewal seen 5 s ago: not a candidate", testobj.Node("n1", up), ago(35 * time.Second), ago(5 * time.Second), false, time.Time{}, 15 * time.Second},
		{"healthy, clock 30 s behind, renewal seen just now: not a candidate", testobj.Node("n1", up), ago(30 * time.Second), now, false, time.Time{}, 20 * time.Second},
		{"healthy, clock 30 s ahead, renewal seen 5 s ago", testobj.Node("n1", up), now.Add(25 * time.Second), ago(5 * time.Second), false, time.Time{}, 15 * time.Second},
		{"dead, clock in step, last renewal seen 20 s ago: candidate", testobj.Node("n1", down), ago(20 * time.Second), ago(20 * time.Second), true, now, 0},
		{"dead, clock 30 s ahead, last renewal seen 20 s ago: candidate as fast", testobj.Node("n1", down), now.Add(10 * time.Second), ago(20 * time.Second), true, now, 0},
		{"dead, clock 30 s behind, last renewal seen 19 s ago: not yet", testobj.Node("n1", down), ago(49 * time.Second), ago(19 * time.Second), false, time.Time{}, time.Second},
		{"dead, clock 30 s ahead, last renewal seen a minute ago", testobj.Node("n1", down), ago(30 * time.Second), ago(time.Minute), true, ago(40 * time.Second), 0},
		{"no observation (zero): counts as renewed now", testobj.Node("n1", down), ago(time.Hour), time.Time{}, false, time.Time{}, 20 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Unhealthy(tc.node, Renewal{Lease: testobj.Lease("n1", tc.renewTime), ObservedAt: tc.observed}, all, now)
			if got.Candidate != tc.candidate || !got.Since.Equal(tc.since) || got.RecheckAfter != tc.recheck {
				t.Errorf("Unhealthy() = %+v, want candidate %v since %s, recheck %s", got, tc.candidate, tc.since, tc.recheck)
			}
			if tc.candidate != Suspect(Renewal{Lease: testobj.Lease("n1", tc.renewTime), ObservedAt: tc.observed}, now) && tc.candidate {
				t.Errorf("a candidate of a stale Lease is not Suspect")
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	now := testobj.Epoch
	if r := Snapshot(testobj.Lease("n1", now.Add(-time.Minute)), now); !r.ObservedAt.Equal(now.Add(-time.Minute)) {
		t.Errorf("Snapshot of a Lease renewed a minute ago: %s", r.ObservedAt)
	}
	if r := Snapshot(testobj.Lease("n1", now.Add(time.Minute)), now); !r.ObservedAt.Equal(now) {
		t.Errorf("Snapshot of a renewTime in the future is not capped at now: %s", r.ObservedAt)
	}
	if r := Snapshot(nil, now); r.Lease != nil || !r.ObservedAt.IsZero() {
		t.Errorf("Snapshot(nil) = %+v", r)
	}
}
