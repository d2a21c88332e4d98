package detect

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"fenceline.io/fenceline/internal/testobj"
)

// TestUnhealthyPowerCheck: under Rules.PowerCheck a node that missed its
// renewal (12.5 s with the default 40 s Lease) is to have its power read,
// and is a candidate only when it read Off for that renewal; before then
// the recheck is at the missed renewal, and without the rule nothing
// changes.
func TestUnhealthyPowerCheck(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	check := Rules{Selector: labels.Everything(), PowerCheck: true}
	noCheck := Rules{Selector: labels.Everything()}
	ready := testobj.ReadySince(ago(time.Hour))
	type want struct {
		candidate  bool
		reason     string
		since      time.Time
		recheck    time.Duration
		checkPower bool
	}
	tests := []struct {
		name     string
		node     *v1.Node
		lease    *coordinationv1.Lease
		powerOff bool
		rules    Rules
		want     want
	}{
		{"renewed 5 s ago: recheck at the missed renewal", testobj.Node("n1", ready), testobj.Lease("n1", ago(5*time.Second)), false, check, want{recheck: 7500 * time.Millisecond}},
		{"renewed 5 s ago, Off from an earlier ask does not count yet", testobj.Node("n1", ready), testobj.Lease("n1", ago(5*time.Second)), true, check, want{recheck: 7500 * time.Millisecond}},
		{"missed its renewal, Ready: check the power", testobj.Node("n1", ready), testobj.Lease("n1", ago(12500*time.Millisecond)), false, check, want{recheck: 7500 * time.Millisecond, checkPower: true}},
		{"missed its renewal, read Off, still Ready: candidate", testobj.Node("n1", ready), testobj.Lease("n1", ago(13*time.Second)), true, check, want{true, ReasonPowerOffObserved, ago(500 * time.Millisecond), 0, false}},
		{"missed its renewal, read Off, NotReady: candidate", testobj.Node("n1", testobj.UnknownSince(ago(time.Second))), testobj.Lease("n1", ago(15*time.Second)), true, check, want{true, ReasonPowerOffObserved, ago(2500 * time.Millisecond), 0, false}},
		{"stale: LeaseExpired whatever the power read", testobj.Node("n1", ready), testobj.Lease("n1", ago(20*time.Second)), false, check, want{true, ReasonLeaseExpired, now, 0, false}},
		{"without the rule, Off changes nothing", testobj.Node("n1", ready), testobj.Lease("n1", ago(13*time.Second)), true, noCheck, want{recheck: 7 * time.Second}},
		{"without the rule, the recheck is at the stale age", testobj.Node("n1", ready), testobj.Lease("n1", ago(5*time.Second)), false, noCheck, want{recheck: 15 * time.Second}},
		{"no Lease: nothing to check", testobj.Node("n1", testobj.UnknownSince(ago(time.Minute))), nil, true, check, want{}},
		{"excluded node: never", testobj.Node("n1", ready, testobj.Label(ExcludeLabel, "")), testobj.Lease("n1", ago(13*time.Second)), true, check, want{}},
		{"a 100 s Lease misses its renewal at 31.25 s", testobj.Node("n1", ready), testobj.Lease("n1", ago(31*time.Second), testobj.LeaseDuration(100*time.Second)), true, check, want{recheck: 250 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := observed(tc.lease)
			r.PowerOff = tc.powerOff
			got := Unhealthy(tc.node, r, tc.rules, now)
			if (want{got.Candidate, got.Reason, got.Since, got.RecheckAfter, got.CheckPower}) != tc.want || got.Message == "" {
				t.Errorf("Unhealthy() = %+v, want %+v with a message", got, tc.want)
			}
		})
	}
}

// TestPowerCheckToken: every renewal and every Lease is its own token.
func TestPowerCheckToken(t *testing.T) {
	at := testobj.Epoch
	l := testobj.Lease("n1", at)
	l.UID = "u1"
	same := l.DeepCopy()
	renewed := l.DeepCopy()
	renewed.Spec.RenewTime = &metav1.MicroTime{Time: at.Add(time.Nanosecond)}
	recreated := l.DeepCopy()
	recreated.UID = "u2"
	if PowerCheckToken(l) == "" || PowerCheckToken(l) != PowerCheckToken(same) {
		t.Fatalf("one renewal, tokens %q and %q", PowerCheckToken(l), PowerCheckToken(same))
	}
	if PowerCheckToken(l) == PowerCheckToken(renewed) || PowerCheckToken(l) == PowerCheckToken(recreated) {
		t.Fatalf("a renewal or a new Lease kept the token %q", PowerCheckToken(l))
	}
	if PowerCheckToken(nil) != "" || PowerCheckToken(&coordinationv1.Lease{}) != "" {
		t.Fatal("a token for no renewal")
	}
}
