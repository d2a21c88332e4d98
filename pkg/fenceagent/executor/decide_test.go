package executor

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fencingRequest is a request for node-1 (UID uid-1) under the policy
// "default", in phase Fencing with Required=True and no attempt.
func fencingRequest(opts ...testobj.RequestOption) *fencingv1alpha1.FencingRequest {
	admitted := []testobj.RequestOption{testobj.RequestName(reqName), testobj.ForNodeUID("uid-1"), testobj.ForPolicy("default"),
		testobj.InPhase(fencingv1alpha1.FencingPhaseFencing),
		testobj.RequestCondition(metav1.Condition{Type: fencingv1alpha1.FencingRequestRequired, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.NewTime(t0)})}
	return testobj.FencingRequest("node-1", append(admitted, opts...)...)
}

func twoLevels() *fencingv1alpha1.FencePolicy {
	return testobj.FencePolicy("default", testobj.Levels(testobj.FenceLevel(1, "bmc"), testobj.FenceLevel(2, "pdu-a", "pdu-b")), testobj.MaxAttempts(3))
}

func ended(level int32, class string, result fencingv1alpha1.FenceAttemptResult, state string, end time.Time) fencingv1alpha1.FenceAttempt {
	e := metav1.NewTime(end)
	return fencingv1alpha1.FenceAttempt{Level: level, FenceClass: class, Method: "Redfish", StartTime: metav1.NewTime(end.Add(-time.Second)),
		EndTime: &e, Result: result, VerifiedPowerState: state}
}

func TestDecide(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-1"}}
	recreated := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-2"}}
	failed, off := fencingv1alpha1.FenceAttemptFailed, fencingv1alpha1.FenceAttemptSucceeded
	running := fencingv1alpha1.FenceAttempt{Level: 1, FenceClass: "bmc", Method: "Redfish", StartTime: metav1.NewTime(t0.Add(-time.Minute))}
	tests := []struct {
		name      string
		req       *fencingv1alpha1.FencingRequest
		policy    *fencingv1alpha1.FencePolicy
		node      *corev1.Node
		want      Action
		reason    string
		wantAfter time.Duration
	}{
		{"admitted: run a round", fencingRequest(), twoLevels(), node, ActionRunRound, ReasonFence, 0},
		{"a missing Node does not stop the fence", fencingRequest(), twoLevels(), nil, ActionRunRound, ReasonFence, 0},
		{"no node UID recorded: any Node of the name", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.NodeUID = "" }), twoLevels(), recreated, ActionRunRound, ReasonFence, 0},
		{"empty action is the API's default Off", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.Action = "" }), twoLevels(), node, ActionRunRound, ReasonFence, 0},
		{"reboot", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.Action = fencingv1alpha1.FenceActionReboot }), twoLevels(), node, ActionRunRound, ReasonFence, 0},
		{"triaged: not admitted yet", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = fencingv1alpha1.FencingPhaseTriaged }), twoLevels(), node, ActionNone, ReasonNotFencing, 0},
		{"fenced: nothing left", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = fencingv1alpha1.FencingPhaseFenced }), twoLevels(), node, ActionNone, ReasonNotFencing, 0},
		{"failed: nothing left", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = fencingv1alpha1.FencingPhaseFailed }), twoLevels(), node, ActionNone, ReasonNotFencing, 0},
		{"Required not True", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Status.Conditions[0].Status = metav1.ConditionFalse }), twoLevels(), node, ActionNone, ReasonNotRequired, 0},
		{"Required missing", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Status.Conditions = nil }), twoLevels(), node, ActionNone, ReasonNotRequired, 0},
		{"missing policy: refuse", fencingRequest(), nil, node, ActionRefuse, ReasonPolicyNotFound, 0},
		{"recreated node: refuse", fencingRequest(), twoLevels(), recreated, ActionRefuse, ReasonNodeRecreated, 0},
		{"unknown action: refuse", fencingRequest(func(r *fencingv1alpha1.FencingRequest) { r.Spec.Action = "Cycle" }), twoLevels(), node, ActionRefuse, ReasonUnsupportedAction, 0},
		{"level 1 proven", fencingRequest(testobj.Attempts(ended(1, "bmc", off, "Off", t0))), twoLevels(), node, ActionNone, ReasonProven, 0},
		{"level 2 proven by both classes", fencingRequest(testobj.FailedRounds(1), testobj.Attempts(ended(1, "bmc", failed, "On", t0), ended(2, "pdu-a", off, "Off", t0), ended(2, "pdu-b", off, "Off", t0))),
			twoLevels(), node, ActionNone, ReasonProven, 0},
		{"one class of level 2 is no proof", fencingRequest(testobj.Attempts(ended(1, "bmc", failed, "On", t0.Add(-time.Hour)), ended(2, "pdu-a", off, "Off", t0.Add(-time.Hour)))),
			twoLevels(), node, ActionRunRound, ReasonFence, 0},
		{"maxAttempts reached", fencingRequest(testobj.FailedRounds(3), testobj.Attempts(ended(1, "bmc", failed, "On", t0))), twoLevels(), node, ActionNone, ReasonMaxAttempts, 0},
		{"maxAttempts defaults to 5", fencingRequest(testobj.FailedRounds(5), testobj.Attempts(ended(1, "bmc", failed, "On", t0))),
			func() *fencingv1alpha1.FencePolicy { p := twoLevels(); p.Spec.StormGuard.MaxAttempts = 0; return p }(), node, ActionNone, ReasonMaxAttempts, 0},
		{"backoff after one failed round: 2s from the last end", fencingRequest(testobj.FailedRounds(1), testobj.Attempts(ended(1, "bmc", failed, "On", t0.Add(-500*time.Millisecond)))),
			twoLevels(), node, ActionRetryAfter, ReasonBackoff, 1500 * time.Millisecond},
		{"backoff after two failed rounds: 4s", fencingRequest(testobj.FailedRounds(2), testobj.Attempts(ended(1, "bmc", failed, "On", t0))), twoLevels(), node, ActionRetryAfter, ReasonBackoff, 4 * time.Second},
		{"backoff counts from the latest end, not the last listed", fencingRequest(testobj.FailedRounds(1), testobj.Attempts(ended(2, "pdu-a", failed, "On", t0), ended(1, "bmc", failed, "On", t0.Add(-time.Hour)))),
			twoLevels(), node, ActionRetryAfter, ReasonBackoff, 2 * time.Second},
		{"backoff over: next round", fencingRequest(testobj.FailedRounds(2), testobj.Attempts(ended(1, "bmc", failed, "On", t0.Add(-4*time.Second)))), twoLevels(), node, ActionRunRound, ReasonFence, 0},
		{"backoff capped at 60s", fencingRequest(testobj.FailedRounds(10), testobj.Attempts(ended(1, "bmc", failed, "On", t0))),
			func() *fencingv1alpha1.FencePolicy { p := twoLevels(); p.Spec.StormGuard.MaxAttempts = 100; return p }(), node, ActionRetryAfter, ReasonBackoff, 60 * time.Second},
		{"interrupted attempt: mark it", fencingRequest(testobj.Attempts(running)), twoLevels(), node, ActionMarkInterrupted, ReasonInterrupted, 0},
		{"interrupted attempt even when the phase moved on", fencingRequest(testobj.Attempts(running), func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = fencingv1alpha1.FencingPhaseFailed }),
			twoLevels(), node, ActionMarkInterrupted, ReasonInterrupted, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.req, tc.policy, tc.node, t0)
			if d.Action != tc.want || d.Reason != tc.reason || d.RetryAfter != tc.wantAfter {
				t.Errorf("Decide = %+v; want %s (%s) after %v", d, tc.want, tc.reason, tc.wantAfter)
			}
			if d.Message == "" {
				t.Error("a decision without a message")
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for rounds, want := range map[int32]time.Duration{0: 0, 1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 5: 32 * time.Second, 6: 60 * time.Second, 100: 60 * time.Second} {
		if got := Backoff(rounds); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", rounds, got, want)
		}
	}
}

func TestLevelProven(t *testing.T) {
	off := fencingv1alpha1.FenceAttemptSucceeded
	req := fencingRequest(testobj.Attempts(ended(2, "pdu-a", off, "Off", t0), ended(2, "pdu-b", off, "Off", t0)))
	if level, ok := LevelProven(req, twoLevels()); !ok || level != 2 {
		t.Errorf("LevelProven = %d, %v; want 2, true", level, ok)
	}
	if _, ok := LevelProven(req, nil); ok {
		t.Error("a missing policy proved a level")
	}
	if _, ok := LevelProven(fencingRequest(), twoLevels()); ok {
		t.Error("no attempt proved a level")
	}
}
