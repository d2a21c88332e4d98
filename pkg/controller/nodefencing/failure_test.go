package nodefencing

import (
	"strings"
	"testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
)

func TestLastFailure(t *testing.T) {
	with := func(a fencingv1alpha1.FenceAttempt, msg string) fencingv1alpha1.FenceAttempt {
		a.Message = msg
		return a
	}
	failed, timedOut := fencingv1alpha1.FenceAttemptFailed, fencingv1alpha1.FenceAttemptTimedOut
	rejected := with(testobj.FenceAttempt(1, "bmc", failed, ""), "credentials rejected by the fence device: redfish off of system 1: 401")
	stillOn := with(testobj.FenceAttempt(2, "pdu", timedOut, fencingv1alpha1.PowerStateOn), "the level's timeout ran out (last read: On)")
	running := testobj.FenceAttempt(1, "bmc", "", "")
	running.EndTime = nil
	long := with(testobj.FenceAttempt(1, "bmc", failed, ""), "credentials rejected by the fence device: "+strings.Repeat("x", 2000))
	for _, tc := range []struct {
		name     string
		attempts []fencingv1alpha1.FenceAttempt
		want     []string
		maxLen   int
	}{
		{"credentials rejected", []fencingv1alpha1.FenceAttempt{rejected, rejected},
			[]string{"level 1, FenceClass bmc (Redfish): Failed: credentials rejected by the fence device: redfish off of system 1: 401"}, 0},
		{"the latest failure, not the first", []fencingv1alpha1.FenceAttempt{rejected, stillOn},
			[]string{"level 2, FenceClass pdu", "TimedOut", "last read: On"}, 0},
		{"a running attempt and a success are skipped", []fencingv1alpha1.FenceAttempt{rejected, testobj.FenceAttempt(2, "pdu", fencingv1alpha1.FenceAttemptSucceeded, fencingv1alpha1.PowerStateOff), running},
			[]string{"FenceClass bmc", "credentials rejected"}, 0},
		{"no attempt ended", []fencingv1alpha1.FenceAttempt{running}, []string{"no fence attempt ended"}, 0},
		{"no attempt at all", nil, []string{"no fence attempt ended"}, 0},
		{"a long message is cut, its cause kept", []fencingv1alpha1.FenceAttempt{long}, []string{"credentials rejected", "..."}, maxFailureDetail + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LastFailure(tc.attempts)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("LastFailure = %q, want it to contain %q", got, w)
				}
			}
			if tc.maxLen > 0 && len(got) > tc.maxLen {
				t.Errorf("LastFailure is %d bytes, want at most %d", len(got), tc.maxLen)
			}
		})
	}
}

// TestFailedRequestNamesTheCause: the request that runs out of rounds
// fails with a message that names the fence agent's cause.
func TestFailedRequestNamesTheCause(t *testing.T) {
	rejected := testobj.FenceAttempt(1, "bmc", fencingv1alpha1.FenceAttemptFailed, "")
	rejected.Message = "credentials rejected by the fence device: redfish off of system 1: 401"
	in := Input{
		Node:    testobj.Node("n1"),
		Policy:  testobj.FencePolicy("p", testobj.MaxAttempts(2)),
		Request: testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFencing), testobj.BootIDAtFence("boot-1"), testobj.FailedRounds(2), testobj.Attempts(rejected, rejected)),
		Now:     testobj.Epoch,
	}
	d := Decide(in)
	if d.Step != StepFail || !strings.Contains(d.Why, "credentials rejected by the fence device") || !strings.Contains(d.Why, "FenceClass bmc") {
		t.Fatalf("Decide = %+v; want StepFail whose why names the rejected credentials of FenceClass bmc", d)
	}
	if len(d.Why) > 1024 {
		t.Errorf("why is %d bytes, over the API's 1024", len(d.Why))
	}
}
