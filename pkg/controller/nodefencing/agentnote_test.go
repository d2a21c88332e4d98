package nodefencing

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
)

func TestAgentNoteDelay(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	admittedAt := func(at time.Time) testobj.RequestOption {
		return testobj.RequestCondition(metav1.Condition{Type: fencingv1alpha1.FencingRequestRequired, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: metav1.NewTime(at)})
	}
	attempted := testobj.Attempts(fencingv1alpha1.FenceAttempt{Level: 1, FenceClass: "bmc", StartTime: metav1.NewTime(now.Add(-time.Second))})
	ended := func(at time.Time) testobj.RequestOption {
		end := metav1.NewTime(at)
		return testobj.Attempts(fencingv1alpha1.FenceAttempt{Level: 1, FenceClass: "bmc", StartTime: metav1.NewTime(at.Add(-2 * time.Second)), EndTime: &end})
	}
	awaiting := Decision{Reason: ReasonAwaitingAgent}
	tests := []struct {
		name string
		r    *fencingv1alpha1.FencingRequest
		d    Decision
		want time.Duration
	}{
		{"no request", nil, awaiting, 0},
		{"admitted 3 s ago, no attempt yet: wait for the agent's first write", testobj.FencingRequest("n1", admittedAt(now.Add(-3*time.Second))), awaiting, 7 * time.Second},
		{"admitted 12 s ago, no attempt: note it", testobj.FencingRequest("n1", admittedAt(now.Add(-12*time.Second))), awaiting, 0},
		{"an attempt started a second ago: the agent is at work", testobj.FencingRequest("n1", admittedAt(now.Add(-3*time.Second)), attempted), awaiting, 9 * time.Second},
		{"the last attempt ended 11 s ago: note it", testobj.FencingRequest("n1", admittedAt(now.Add(-30*time.Second)), ended(now.Add(-11*time.Second))), awaiting, 0},
		{"another reason", testobj.FencingRequest("n1", admittedAt(now.Add(-3*time.Second))), Decision{Reason: ReasonInvalidPolicy}, 0},
		{"no Required condition", testobj.FencingRequest("n1"), awaiting, 0},
		{"admission stamped far ahead of this clock (another replica's)", testobj.FencingRequest("n1", admittedAt(now.Add(time.Minute))), awaiting, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentNoteDelay(tc.r, tc.d, now); got != tc.want {
				t.Errorf("agentNoteDelay = %v, want %v", got, tc.want)
			}
		})
	}
}
