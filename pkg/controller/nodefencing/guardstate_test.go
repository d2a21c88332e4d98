package nodefencing

import (
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/stormguard"
)

// rate sets the policy's token bucket.
func rate(qps string, burst int32) testobj.PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) {
		q := resource.MustParse(qps)
		p.Spec.StormGuard.Rate = fencingv1alpha1.FenceRate{QPS: &q, Burst: burst}
	}
}

// withGuardStatus sets the policy's saved storm-guard state.
func withGuardStatus(s *fencingv1alpha1.StormGuardStatus) testobj.PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Status.StormGuard = s }
}

func TestGuardStatusRoundTrip(t *testing.T) {
	at := testobj.Epoch
	saved := stormguard.Saved{Tokens: 1.2345, BucketTime: at.Add(-time.Second), StormActive: true, StormSince: at.Add(-time.Minute), LastExit: at.Add(-time.Hour), Written: at}
	got := SavedGuard(GuardStatus(saved))
	want := saved
	want.Tokens = 1.234 // rounded down: the saved bucket never holds more
	if *got != want {
		t.Errorf("round trip = %+v, want %+v", *got, want)
	}
	if SavedGuard(nil) != nil {
		t.Error("no status read as a saved state")
	}
	if s := SavedGuard(&fencingv1alpha1.StormGuardStatus{}); !math.IsNaN(s.Tokens) {
		t.Errorf("a status without tokens reads as %v tokens, want NaN (unreadable)", s.Tokens)
	}
}

// admitOnce drives n1 from no request to the storm guard's decision.
func (e *env) admitOnce() {
	e.t.Helper()
	for range 3 {
		e.sync("n1")
	}
}

// TestSyncGuardStateSurvivesRestart: the admission spends the policy's only
// token and saves the bucket in the policy's status before the fence
// starts. A controller started afterwards, on a clock an hour ahead,
// restores it and refuses the next node until a token refills on its own
// clock, where a fresh bucket would have admitted at once.
func TestSyncGuardStateSurvivesRestart(t *testing.T) {
	now := testobj.Epoch
	slow := rate("0.01", 1) // one token per 100 s
	e := newEnv(t, now, cluster(now, nil, testobj.FencePolicy("p", slow))[1:]...)
	e.admitOnce()
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	p, err := e.Fencing.FencingV1alpha1().FencePolicies().Get(e.Ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sg := p.Status.StormGuard
	if sg == nil || sg.Tokens == nil || sg.Tokens.MilliValue() != 0 || sg.UpdateTime == nil || !sg.UpdateTime.Time.Equal(now) {
		t.Fatalf("policy status after the admission = %+v, want an empty bucket saved at %s", sg, now)
	}

	later := now.Add(time.Hour)
	restarted := newEnv(t, later, cluster(later, nil, testobj.FencePolicy("p", slow, withGuardStatus(sg)))[1:]...)
	restarted.admitOnce()
	restarted.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
	restarted.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRequired, metav1.ConditionFalse, stormguard.ReasonRateLimited)

	fresh := newEnv(t, later, cluster(later, nil, testobj.FencePolicy("p", slow))[1:]...)
	fresh.admitOnce()
	fresh.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
}

// TestSyncGuardStateUnreadable: a saved state that cannot be read holds
// the cooldown from now: nothing is admitted until it has run.
func TestSyncGuardStateUnreadable(t *testing.T) {
	now := testobj.Epoch
	broken := &fencingv1alpha1.StormGuardStatus{Tokens: resource.NewQuantity(2, resource.DecimalSI)} // no times
	e := newEnv(t, now, cluster(now, nil, testobj.FencePolicy("p", withGuardStatus(broken)))[1:]...)
	e.admitOnce()
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRequired, metav1.ConditionFalse, stormguard.ReasonStormCooldownActive)
}
