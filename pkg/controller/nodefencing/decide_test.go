package nodefencing

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

const (
	pending    = fencingv1alpha1.FencingPhasePending
	triaged    = fencingv1alpha1.FencingPhaseTriaged
	fencing    = fencingv1alpha1.FencingPhaseFencing
	fenced     = fencingv1alpha1.FencingPhaseFenced
	recovering = fencingv1alpha1.FencingPhaseRecovering
	failed     = fencingv1alpha1.FencingPhaseFailed

	succeeded = fencingv1alpha1.FenceAttemptSucceeded
	off       = fencingv1alpha1.PowerStateOff
)

func TestDecide(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }

	// The node n1 in its states. dead: Ready=Unknown for a minute, under
	// stale below; healthy: Ready for an hour, under fresh below.
	dead := testobj.UnknownSince(ago(time.Minute))
	up := testobj.ReadySince(ago(time.Hour))
	stale := testobj.Lease("n1", ago(time.Minute))
	fresh := testobj.Lease("n1", now)
	recreated := testobj.NodeUID("uid-n1-new")
	oos := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, ago(time.Hour))
	owner := testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-req-n1")
	rebooted := testobj.BootID("boot-2")

	pol := testobj.FencePolicy("p")
	manualPol := testobj.FencePolicy("p", testobj.ManualApproval())
	pausedPol := testobj.FencePolicy("p", testobj.Paused())
	noPowerCheck := testobj.FencePolicy("p", testobj.PowerCheck(fencingv1alpha1.PowerCheckNever))
	// missed: the node missed its renewal 0.5 s ago (12.5 s is 1.25 renew
	// intervals of the default 40 s Lease); token names that renewal.
	missed := testobj.Lease("n1", ago(13*time.Second))
	token := detect.PowerCheckToken(missed)
	earlier := detect.PowerCheckToken(testobj.Lease("n1", ago(25*time.Second)))
	target := func(opts ...testobj.TargetOption) *fencingv1alpha1.FenceTarget {
		return testobj.FenceTarget("n1", opts...)
	}
	readOff := target(testobj.PowerCheckAsked(token), testobj.PowerCheckAnswered(token, off))
	powerOffReq := func(opts ...testobj.RequestOption) *fencingv1alpha1.FencingRequest {
		r := testobj.FencingRequest("n1", opts...)
		r.Spec.Reason = detect.ReasonPowerOffObserved
		return r
	}
	proof := testobj.Attempts(testobj.FenceAttempt(1, "bmc", succeeded, off))
	atFence := testobj.BootIDAtFence("boot-1")
	failedReq := testobj.FencingRequest("n1", testobj.InPhase(failed), atFence)

	type want struct {
		step    Step
		reason  string
		level   int32
		recheck time.Duration
	}
	tests := []struct {
		name string
		in   Input
		want want
	}{
		// No open request: create one for a candidate, and only then.
		{"no request, Lease stale for 40 s: create", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol},
			want{step: StepCreate, reason: detect.ReasonLeaseExpired}},
		{"no request, Ready with a fresh Lease: none until the node may miss its renewal", Input{Node: testobj.Node("n1", up), Lease: testobj.Lease("n1", ago(5*time.Second)), Policy: pol},
			want{reason: ReasonNotCandidate, recheck: 7500 * time.Millisecond}},
		{"no request, fresh Lease, power checks off: none until the Lease may go stale", Input{Node: testobj.Node("n1", up), Lease: testobj.Lease("n1", ago(5*time.Second)), Policy: noPowerCheck},
			want{reason: ReasonNotCandidate, recheck: 15 * time.Second}},
		// A missed renewal: the power check, then its answer.
		{"no request, missed its renewal: ask for a power check", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: target()},
			want{step: StepCheckPower, reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, an earlier silence was checked: ask anew", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: target(testobj.PowerCheckAsked(earlier), testobj.PowerCheckAnswered(earlier, off))},
			want{step: StepCheckPower, reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, asked, no answer yet: wait", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: target(testobj.PowerCheckAsked(token))},
			want{reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, reads On: wait for the stale Lease", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: target(testobj.PowerCheckAsked(token), testobj.PowerCheckAnswered(token, fencingv1alpha1.PowerStateOn))},
			want{reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, device silent (Unknown): wait for the stale Lease", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: target(testobj.PowerCheckAsked(token), testobj.PowerCheckAnswered(token, fencingv1alpha1.PowerStateUnknown))},
			want{reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, no FenceTarget: wait for the stale Lease", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol},
			want{reason: ReasonMissedRenewal, recheck: 7 * time.Second}},
		{"no request, missed its renewal, reads Off, still Ready: create", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: readOff},
			want{step: StepCreate, reason: detect.ReasonPowerOffObserved}},
		{"no request, missed its renewal, reads Off, power checks off: nothing", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: noPowerCheck, Target: readOff},
			want{reason: ReasonNotCandidate, recheck: 7 * time.Second}},
		{"no request, missed its renewal, reads Off, policy paused: no request", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pausedPol, Target: readOff},
			want{reason: ReasonPaused}},
		{"no request, missed its renewal, reads Off, node labelled out of fencing: nothing", Input{Node: testobj.Node("n1", up, testobj.Label(detect.ExcludeLabel, "")), Lease: missed, Policy: pol, Target: readOff},
			want{reason: ReasonNotCandidate}},
		{"automatic Pending of a power loss, still Off: triaged and admitted at once", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: readOff, Request: powerOffReq()},
			want{step: StepTriageAdmit, reason: detect.ReasonPowerOffObserved}},
		{"automatic Triaged of a power loss: admitted without settling", Input{Node: testobj.Node("n1", up), Lease: missed, Policy: pol, Target: readOff, Request: powerOffReq(testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: detect.ReasonPowerOffObserved}},
		{"automatic Triaged of a power loss, the node renewed since: cancel", Input{Node: testobj.Node("n1", up), Lease: fresh, LeaseRenewed: true, Policy: pol, Target: readOff, Request: powerOffReq(testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		// Another detector owns the node: no request, no power check; the
		// marks a Failed request left are still cleared, and a request
		// its remediation created is driven as any other.
		{"no request, candidate, labelled for another detector: no request", Input{Node: testobj.Node("n1", dead, testobj.Label(detect.ExternalDetectionLabel, "medik8s-nhc")), Lease: stale, Policy: pol},
			want{reason: ReasonExternalDetection}},
		{"no request, missed its renewal, labelled for another detector: no power check", Input{Node: testobj.Node("n1", up, testobj.Label(detect.ExternalDetectionLabel, "")), Lease: missed, Policy: pol, Target: target()},
			want{reason: ReasonExternalDetection}},
		{"no request, missed its renewal, reads Off, labelled for another detector: no request", Input{Node: testobj.Node("n1", up, testobj.Label(detect.ExternalDetectionLabel, "capi-mhc")), Lease: missed, Policy: pol, Target: readOff},
			want{reason: ReasonExternalDetection}},
		{"labelled for another detector, its remediation's Pending request: triage", Input{Node: testobj.Node("n1", dead, testobj.Label(detect.ExternalDetectionLabel, "medik8s-nhc")), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("x"), testobj.Approved(true))},
			want{step: StepTriageAdmit, reason: "Manual"}},
		{"labelled for another detector, its remediation's approved Triaged request: admit", Input{Node: testobj.Node("n1", dead, testobj.Label(detect.ExternalDetectionLabel, "medik8s-nhc")), Lease: stale, Policy: manualPol, Request: testobj.FencingRequest("n1", testobj.ByUser("x"), testobj.Approved(true), testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: "Manual"}},
		{"no request, node labelled out of fencing", Input{Node: testobj.Node("n1", dead, testobj.Label(detect.ExcludeLabel, "")), Lease: stale, Policy: pol},
			want{reason: ReasonNotCandidate}},
		{"no request, candidate, but a request of its boot failed: blocked", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Blocked: "FencingRequest n1-req failed"},
			want{reason: ReasonEarlierFailure}},
		{"no request, candidate, policy paused: no request", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol},
			want{reason: ReasonPaused}},
		{"no request, healthy, policy paused: not a candidate", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pausedPol},
			want{reason: ReasonNotCandidate, recheck: 12500 * time.Millisecond}},
		{"no request, no policy selects the node", Input{Node: testobj.Node("n1", dead), Lease: stale},
			want{reason: ReasonNoPolicy}},
		{"no request, two policies select the node", Input{Node: testobj.Node("n1", dead), Lease: stale, PolicyProblem: "node n1 is selected by several FencePolicies (a, b)"},
			want{reason: ReasonInvalidPolicy}},
		{"no request, the policy names a missing class", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, PolicyProblem: "FencePolicy p names FenceClasses that do not exist: bmc"},
			want{reason: ReasonInvalidPolicy}},
		{"no request, node deleted", Input{Lease: stale, Policy: pol}, want{}},

		// Pending and Triaged.
		{"Pending, node still a candidate, settled: triaged and admitted at once", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepTriageAdmit, reason: "LeaseExpired"}},
		{"new request without a phase: triaged and admitted at once", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(""))},
			want{step: StepTriageAdmit, reason: "LeaseExpired"}},
		{"Pending, Lease stale just now: triage alone while it settles", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(20*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepTriage, reason: "LeaseExpired"}},
		{"Pending, Lease stale 5 s: settled, triaged and admitted at once", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(25*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepTriageAdmit, reason: "LeaseExpired"}},
		{"Pending request naming no node UID: the node is its node", Input{Node: testobj.Node("n1", dead, recreated), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ForNodeUID(""))},
			want{step: StepTriageAdmit, reason: "LeaseExpired"}},
		{"automatic Pending, node healthy again: cancel", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		{"automatic Triaged, node healthy again: cancel", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		{"automatic Triaged after a restart, Lease only seen since, node not Ready: wait, neither cancel nor admit", Input{Node: testobj.Node("n1", dead), Lease: stale, LeaseObserved: ago(5 * time.Second), Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonAwaitingRenewal, recheck: 7500 * time.Millisecond}},
		{"automatic Triaged after a restart, Lease seen renewed since: cancel", Input{Node: testobj.Node("n1", dead), Lease: stale, LeaseObserved: ago(5 * time.Second), LeaseRenewed: true, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		{"automatic Triaged after a restart, node reports Ready: cancel", Input{Node: testobj.Node("n1", up), Lease: stale, LeaseObserved: ago(5 * time.Second), Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		{"automatic Pending, node deleted: cancel", Input{Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepCancel, reason: ReasonNodeDeleted}},
		{"automatic Triaged, node deleted: cancel", Input{Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeDeleted}},
		{"automatic Triaged, node recreated (another UID), dead too: cancel", Input{Node: testobj.Node("n1", dead, recreated), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeRecreated}},
		{"automatic Pending, node recreated and healthy: cancel as recreated", Input{Node: testobj.Node("n1", up, recreated), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1")},
			want{step: StepCancel, reason: ReasonNodeRecreated}},
		{"manual Pending, node healthy: a human asked, triaged and admitted at once", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"))},
			want{step: StepTriageAdmit, reason: "Manual"}},
		{"manual Triaged, node healthy, policy approves: admit", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: "Manual"}},
		{"Pending, policy gone: wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Request: testobj.FencingRequest("n1")},
			want{reason: ReasonInvalidPolicy}},
		{"Pending, policy invalid: wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, PolicyProblem: "FencePolicy p has no level", Request: testobj.FencingRequest("n1")},
			want{reason: ReasonInvalidPolicy}},
		{"Triaged, policy invalid: no admission", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, PolicyProblem: "FencePolicy p has no level", Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonInvalidPolicy}},
		{"Triaged, candidate, automatic approval: admit", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: "LeaseExpired"}},
		{"Triaged, Lease stale just now: settle half a renew interval first", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(20*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonSettling, recheck: 5 * time.Second}},
		{"Triaged, Lease stale 4 s: still settling", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(24*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonSettling, recheck: time.Second}},
		{"Triaged, Lease stale 5 s: settled, admit", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(25*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: "LeaseExpired"}},
		{"Triaged manual request, Lease stale just now: a human asked, no settling", Input{Node: testobj.Node("n1", dead), Lease: testobj.Lease("n1", ago(20*time.Second)), Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged), testobj.Approved(true))},
			want{step: StepAdmit, reason: "Manual"}},
		{"Triaged, manual approval, spec.approved unset: wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: manualPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonAwaitingApproval}},
		{"Triaged, manual approval, spec.approved false: wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: manualPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged), testobj.Approved(false))},
			want{reason: ReasonAwaitingApproval}},
		{"Triaged, manual approval, spec.approved true: admit", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: manualPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged), testobj.Approved(true))},
			want{step: StepAdmit, reason: "LeaseExpired"}},
		{"Triaged, automatic policy but spec.approved false: the request decides, wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged), testobj.Approved(false))},
			want{reason: ReasonAwaitingApproval}},
		{"automatic Pending, policy paused: triage still", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol, Request: testobj.FencingRequest("n1")},
			want{step: StepTriage, reason: "LeaseExpired"}},
		{"automatic Triaged, policy paused: no admission", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{reason: ReasonPaused}},
		{"automatic Triaged, policy paused, node healthy again: cancel", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pausedPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged))},
			want{step: StepCancel, reason: ReasonNodeHealthy}},
		{"automatic Triaged, policy paused, an operator approved it: admit", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol, Request: testobj.FencingRequest("n1", testobj.InPhase(triaged), testobj.Approved(true))},
			want{step: StepAdmit, reason: "LeaseExpired"}},
		{"manual Triaged, policy paused: a human asked, admit", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged))},
			want{step: StepAdmit, reason: "Manual"}},
		{"Fencing, policy paused: the fence goes on", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pausedPol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, proof)},
			want{step: StepFenced, reason: "Level1Verified", level: 1}},
		{"Pending, manual approval: triage first", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: manualPol, Request: testobj.FencingRequest("n1")},
			want{step: StepTriage, reason: "LeaseExpired"}},

		// Fencing: only a level read back Off ends it well; never cancelled.
		{"Fencing, level 1 read back Off: fenced", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, proof)},
			want{step: StepFenced, reason: "Level1Verified", level: 1}},
		{"Fencing, level 1 failed, both classes of level 2 Off: fenced at 2", Input{Node: testobj.Node("n1", dead), Lease: stale,
			Policy: testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "bmc"), testobj.FenceLevel(2, "pdu-a", "pdu-b"))),
			Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.Attempts(testobj.FenceAttempt(1, "bmc", fencingv1alpha1.FenceAttemptTimedOut, fencingv1alpha1.PowerStateOn),
				testobj.FenceAttempt(2, "pdu-a", succeeded, off), testobj.FenceAttempt(2, "pdu-b", succeeded, off)))},
			want{step: StepFenced, reason: "Level2Verified", level: 2}},
		{"Fencing, one class of two at level 2 Off: no proof", Input{Node: testobj.Node("n1", dead), Lease: stale,
			Policy:  testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(2, "pdu-a", "pdu-b"))),
			Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.Attempts(testobj.FenceAttempt(2, "pdu-a", succeeded, off)))},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, Succeeded but no power state read back: no proof", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.Attempts(testobj.FenceAttempt(1, "bmc", succeeded, "")))},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, Succeeded but read back On: no proof", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.Attempts(testobj.FenceAttempt(1, "bmc", succeeded, fencingv1alpha1.PowerStateOn)))},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, Off read back on a Failed attempt: no proof", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.Attempts(testobj.FenceAttempt(1, "bmc", fencingv1alpha1.FenceAttemptFailed, off)))},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, no attempt yet: wait for the agent", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence)},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, 4 failed rounds of the default 5: wait", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.FailedRounds(4))},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, 5 failed rounds of the default 5: fail", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.FailedRounds(5))},
			want{step: StepFail, reason: "MaxAttemptsReached"}},
		{"Fencing, maxAttempts 2 and 3 failed rounds: fail", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: testobj.FencePolicy("p", testobj.MaxAttempts(2)), Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.FailedRounds(3))},
			want{step: StepFail, reason: "MaxAttemptsReached"}},
		{"Fencing, proven in the round that also reached maxAttempts: the proof wins", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.FailedRounds(5), proof)},
			want{step: StepFenced, reason: "Level1Verified", level: 1}},
		{"Fencing, policy gone: Off attempts prove nothing, stays Fencing", Input{Node: testobj.Node("n1", dead), Lease: stale, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, proof)},
			want{reason: ReasonInvalidPolicy}},
		{"Fencing, node healthy again: never cancelled", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence)},
			want{reason: ReasonAwaitingAgent}},
		{"Fencing, node deleted: never cancelled", Input{Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence)},
			want{reason: ReasonAwaitingAgent}},
		{"manual Fencing, node healthy: never cancelled", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(fencing), atFence)},
			want{reason: ReasonAwaitingAgent}},

		// Fenced: out of service, then a return with a new boot ID.
		{"Fenced, no out-of-service taint: add it", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence, proof)},
			want{step: StepOutOfService, reason: "Fenced"}},
		{"Fenced, our out-of-service taint present: wait for the node", Input{Node: testobj.Node("n1", dead, oos, owner), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, a human's out-of-service taint present: not added again", Input{Node: testobj.Node("n1", dead, oos), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, owner annotation names the request but the taint was removed: not added again", Input{Node: testobj.Node("n1", dead, owner), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, policy says outOfServiceTaint None", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: testobj.FencePolicy("p", testobj.NoOutOfServiceTaint()), Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, node recreated: no out-of-service taint on the new node", Input{Node: testobj.Node("n1", dead, recreated), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{}},
		{"Fenced, node recreated Ready with a new boot ID: never recovered", Input{Node: testobj.Node("n1", up, recreated, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{}},
		{"Fenced, node deleted: stays fenced", Input{Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)}, want{}},
		{"Fenced, policy gone: stays fenced", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)}, want{}},
		{"Fenced, Ready as reported before the fence, no sign of life since: down, no warning", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, one renewal since the fence (it may have been in flight): down", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence), Signs: LifeSigns{Watching: true, LeaseRenewals: 1, ReadyReports: 1}},
			want{reason: ReasonNodeDown}},
		{"Fenced, Lease renewed twice since the fence with the fenced boot ID: a lying fence, stays fenced", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence), Signs: LifeSigns{Watching: true, LeaseRenewals: 2}},
			want{reason: ReasonLyingFence}},
		{"Fenced, lie recorded on the node, no observations (restart): still a lying fence", Input{Node: testobj.Node("n1", up, oos, owner, lieCaught), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonLyingFence}},
		{"Fenced, lie recorded, the node rebooted: recovering", Input{Node: testobj.Node("n1", up, oos, owner, lieCaught, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{step: StepRecovering, reason: "NewBootID"}},
		{"Fenced, Ready, boot ID at fence time unknown: stays fenced", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced))},
			want{reason: ReasonUnknownBootID}},
		{"Fenced, Ready, node reports no boot ID: stays fenced", Input{Node: testobj.Node("n1", up, oos, owner, testobj.BootID("")), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonUnknownBootID}},
		{"Fenced, new boot ID but not Ready: wait", Input{Node: testobj.Node("n1", testobj.NotReadySince(ago(time.Second)), oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{reason: ReasonNodeDown}},
		{"Fenced, Ready with a new boot ID: recovering", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence)},
			want{step: StepRecovering, reason: "NewBootID"}},

		// Recovering: unfence once nothing of the old boot is left.
		{"Recovering, not Ready: wait", Input{Node: testobj.Node("n1", testobj.NotReadySince(ago(time.Second)), oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonNodeDown}},
		{"Recovering, Ready 3 s of the default 10 s: wait 7 s", Input{Node: testobj.Node("n1", testobj.ReadySince(ago(3*time.Second)), oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonHealthyDelay, recheck: 7 * time.Second}},
		{"Recovering, Ready 30 s of a 1 m healthy delay: wait 30 s", Input{Node: testobj.Node("n1", testobj.ReadySince(ago(30*time.Second)), oos, owner, rebooted), Lease: fresh, Policy: testobj.FencePolicy("p", testobj.HealthyDelay(time.Minute)), Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonHealthyDelay, recheck: 30 * time.Second}},
		{"Recovering, Ready exactly the healthy delay: recover", Input{Node: testobj.Node("n1", testobj.ReadySince(ago(10*time.Second)), oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{step: StepRecover, reason: "Unfenced"}},
		{"Recovering, a VolumeAttachment left: wait", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence), VolumeAttachments: 1},
			want{reason: ReasonAttachmentsRemain}},
		{"Recovering, volumes in use left: wait", Input{Node: testobj.Node("n1", up, oos, owner, rebooted, testobj.VolumesInUse("kubernetes.io/csi/disk^v1")), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonVolumesInUse}},
		{"Recovering, policy unfences by hand", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: testobj.FencePolicy("p", testobj.ManualUnfence()), Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonManualUnfence}},
		{"Recovering, boot ID back to the fenced one: wait", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{reason: ReasonSameBootID}},
		{"Recovering, node recreated: never recovered", Input{Node: testobj.Node("n1", up, recreated, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{}},
		{"Recovering, policy gone: stays fenced", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{}},
		{"Recovering, all clear: recover", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence)},
			want{step: StepRecover, reason: "Unfenced"}},

		// Asks (kubectl fenceline unfence, fence --override-exclusion).
		{"automatic Pending, node dead, operator asks: cancel", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.UnfenceAsked("user:ada", ""))},
			want{step: StepCancel, reason: ReasonUnfenceRequested}},
		{"manual Triaged, operator asks: cancel", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged), testobj.Approved(true), testobj.UnfenceAsked("user:bob", ""))},
			want{step: StepCancel, reason: ReasonUnfenceRequested}},
		{"Fencing, operator asks: never stopped", Input{Node: testobj.Node("n1", up), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencing), atFence, testobj.UnfenceAsked("user:ada", "Off"))},
			want{reason: ReasonAwaitingAgent}},
		{"manual Pending, node excluded from fencing: held", Input{Node: testobj.Node("n1", up, testobj.Label(detect.ExcludeLabel, "")), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.Approved(true))},
			want{reason: ReasonExcluded}},
		{"manual Triaged, node labelled excluded after triage: not admitted", Input{Node: testobj.Node("n1", dead, testobj.Label(detect.ExcludeLabel, "")), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged), testobj.Approved(true))},
			want{reason: ReasonExcluded}},
		{"manual Triaged, node excluded, exclusion overridden: admit", Input{Node: testobj.Node("n1", up, testobj.Label(detect.ExcludeLabel, "")), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(triaged), testobj.Approved(true), testobj.ExclusionOverridden())},
			want{step: StepAdmit, reason: "Manual"}},
		{"Fenced, boot ID at fence unknown, verified rebooted: recovering", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), testobj.UnfenceAsked("user:ada", "Rebooted"))},
			want{step: StepRecovering, reason: ReasonVerifiedByOperator}},
		{"Fenced, boot ID at fence unknown, ask without a verification: stays fenced", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), testobj.UnfenceAsked("user:ada", "yes"))},
			want{reason: ReasonUnknownBootID}},
		{"Fenced, same boot ID, verified Off: a boot ID that did not change wins", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence, testobj.UnfenceAsked("user:ada", "Off"))},
			want{reason: ReasonNodeDown}},
		{"Fenced, same boot ID alive, verified Off: a lying fence all the same", Input{Node: testobj.Node("n1", up, oos, owner), Lease: fresh, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fenced), atFence, testobj.UnfenceAsked("user:ada", "Off")), Signs: LifeSigns{Watching: true, ReadyReports: 2}},
			want{reason: ReasonLyingFence}},
		{"Recovering, policy unfences by hand, operator asks: recover", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: testobj.FencePolicy("p", testobj.ManualUnfence()), Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence, testobj.UnfenceAsked("user:ada", ""))},
			want{step: StepRecover, reason: "Unfenced"}},
		{"Recovering, policy unfences by hand, asked, a VolumeAttachment left: wait", Input{Node: testobj.Node("n1", up, oos, owner, rebooted), Lease: fresh, Policy: testobj.FencePolicy("p", testobj.ManualUnfence()), Request: testobj.FencingRequest("n1", testobj.InPhase(recovering), atFence, testobj.UnfenceAsked("user:ada", "")), VolumeAttachments: 1},
			want{reason: ReasonAttachmentsRemain}},

		// No open request, marks of a Failed or deleted request left.
		{"Failed request's marks, Ready with a new boot ID: clear", Input{Node: testobj.Node("n1", up, rebooted, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: failedReq},
			want{step: StepClear, reason: "Unfenced"}},
		{"Failed request's marks, Ready 3 s: wait 7 s", Input{Node: testobj.Node("n1", testobj.ReadySince(ago(3*time.Second)), rebooted, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: failedReq},
			want{reason: ReasonHealthyDelay, recheck: 7 * time.Second}},
		{"Failed request's marks, Ready with the same boot ID: they stay", Input{Node: testobj.Node("n1", up, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: failedReq},
			want{reason: ReasonSameBootID}},
		{"Failed request's marks, same boot ID, verified Rebooted: they stay", Input{Node: testobj.Node("n1", up, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: testobj.FencingRequest("n1", testobj.InPhase(failed), atFence, testobj.UnfenceAsked("user:ada", "Rebooted"))},
			want{reason: ReasonSameBootID}},
		{"Failed request's marks, no boot ID at fence, verified Off: clear", Input{Node: testobj.Node("n1", up, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: testobj.FencingRequest("n1", testobj.InPhase(failed), testobj.UnfenceAsked("user:ada", "Off"))},
			want{step: StepClear, reason: "Unfenced"}},
		{"Failed request's marks, node not Ready: they stay", Input{Node: testobj.Node("n1", testobj.NotReadySince(ago(time.Second)), rebooted, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol, Failed: failedReq},
			want{reason: ReasonNodeDown}},
		{"Failed request's marks, node dead again, blocked: no new request", Input{Node: testobj.Node("n1", dead, testobj.FailedFenceMarks(ago(time.Hour))), Lease: stale, Policy: pol, Failed: failedReq, Blocked: "FencingRequest n1-req failed"},
			want{reason: ReasonEarlierFailure}},
		{"marks of an older boot's failure, node dead again: a new request takes them over", Input{Node: testobj.Node("n1", dead, rebooted, testobj.FailedFenceMarks(ago(time.Hour))), Lease: stale, Policy: pol, Failed: failedReq},
			want{step: StepCreate, reason: detect.ReasonLeaseExpired}},
		{"request deleted, marks left, no boot ID to compare: they stay", Input{Node: testobj.Node("n1", up, rebooted, testobj.FailedFenceMarks(ago(time.Hour))), Lease: fresh, Policy: pol},
			want{reason: ReasonUnknownBootID}},
		{"request deleted, marks left, operator verified Rebooted on the node: clear", Input{Node: testobj.Node("n1", up, testobj.FailedFenceMarks(ago(time.Hour)), testobj.NodeUnfenceAsked("user:ada", "Rebooted")), Lease: fresh, Policy: pol},
			want{step: StepClear, reason: "Unfenced"}},
		{"request deleted, marks left, no policy any more, verified: clear after the default delay", Input{Node: testobj.Node("n1", up, testobj.FailedFenceMarks(ago(time.Hour)), testobj.NodeUnfenceAsked("user:ada", "Off"))},
			want{step: StepClear, reason: "Unfenced"}},
		{"fenced request deleted, out of service, new boot, a VolumeAttachment left: they stay", Input{Node: testobj.Node("n1", up, rebooted, oos, owner, testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, ago(time.Hour))), Lease: fresh, Policy: pol, Failed: failedReq, VolumeAttachments: 1},
			want{reason: ReasonAttachmentsRemain}},
		{"fenced request deleted, out of service, verified, volumes in use: they stay", Input{Node: testobj.Node("n1", up, oos, owner, testobj.NodeUnfenceAsked("user:ada", "Off"), testobj.VolumesInUse("kubernetes.io/csi/disk^v1")), Lease: fresh, Policy: pol},
			want{reason: ReasonVolumesInUse}},
		{"fenced request deleted, out of service, verified, nothing left: clear", Input{Node: testobj.Node("n1", up, oos, owner, testobj.NodeUnfenceAsked("user:ada", "Off")), Lease: fresh, Policy: pol},
			want{step: StepClear, reason: "Unfenced"}},

		// A terminal request is never acted on.
		{"Recovered request given: nothing", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseRecovered))}, want{}},
		{"Failed request given: nothing", Input{Node: testobj.Node("n1", dead), Lease: stale, Policy: pol, Request: testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFailed))}, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			tc.in = seenAtRenewal(tc.in)
			got := Decide(tc.in)
			if (want{got.Step, got.Reason, got.Level, got.RecheckAfter}) != tc.want || got.Why == "" {
				t.Errorf("Decide() = %+v\nwant %+v with a Why", got, tc.want)
			}
			if msg := brokenInvariant(tc.in, got); msg != "" {
				t.Errorf("Decide() = %+v breaks an invariant: %s", got, msg)
			}
		})
	}
}

// brokenInvariant checks a decision against the safety invariants of
// Decide's doc comment, whatever the case expects; "" when they hold.
func brokenInvariant(in Input, d Decision) string {
	phase := fencingv1alpha1.FencingPhase("")
	if in.Request != nil {
		phase = in.Request.Status.Phase
	}
	recreated := in.Node != nil && in.Request != nil && in.Request.Spec.NodeUID != "" && in.Node.UID != in.Request.Spec.NodeUID
	switch d.Step {
	case StepFenced:
		var levels []fencingv1alpha1.FenceLevel
		if in.Policy != nil {
			levels = in.Policy.Spec.Levels
		}
		if !provenByHand(in.Request.Status.Attempts, levels, d.Level) {
			return fmt.Sprintf("Fenced at level %d without every class of it read back Off", d.Level)
		}
	case StepOutOfService:
		if phase != fenced {
			return "out-of-service taint for a request in phase " + string(phase)
		}
		if in.Node == nil || recreated {
			return "out-of-service taint on a node the request is not about"
		}
	case StepCancel:
		if phase == fencing || phase == fenced || phase == recovering {
			return "cancelled a request in phase " + string(phase)
		}
	case StepClear:
		return brokenClear(in)
	case StepRecovering, StepRecover:
		n := in.Node
		if n == nil || recreated {
			return "recovered a node the request is not about"
		}
		rc := readyCondition(n)
		if rc == nil || rc.Status != v1.ConditionTrue || !rebootShown(in.Request.Status.BootIDAtFence, n, in.Request.Annotations) {
			return "recovery without a Ready node on a new boot ID, or a verified ask where no boot ID is known"
		}
		if d.Step == StepRecover && (in.VolumeAttachments > 0 || len(n.Status.VolumesInUse) > 0) {
			return "unfenced with volumes left"
		}
		if d.Step == StepRecover && in.Now.Sub(rc.LastTransitionTime.Time) < HealthyDelay(in.Policy) {
			return "unfenced before the healthy delay"
		}
	}
	if phase == fencing && d.Step != StepNone && d.Step != StepFenced && d.Step != StepFail {
		return "a Fencing request left for " + string(d.Step)
	}
	return ""
}

// rebootShown restates the reboot rule: a known boot ID that differs from
// the known one at fence time, or, where either is unknown, an operator's
// ask verified Off or Rebooted.
func rebootShown(atFence string, n *v1.Node, annotations map[string]string) bool {
	now := n.Status.NodeInfo.BootID
	if atFence != "" && now != "" {
		return atFence != now
	}
	v := annotations[names.UnfenceVerifiedAnnotation]
	_, asked := annotations[names.UnfenceAnnotation]
	return asked && (v == "Off" || v == "Rebooted")
}

// brokenClear checks a decision to clear the marks a request left: no open
// request, a Ready node, a reboot shown against the Failed request's boot
// ID (none known for a deleted one), and for marks that cut the node off
// no volume left.
func brokenClear(in Input) string {
	n := in.Node
	if in.Request != nil || n == nil {
		return "marks cleared with an open request or no node"
	}
	if rc := readyCondition(n); rc == nil || rc.Status != v1.ConditionTrue {
		return "marks cleared on a node that is not Ready"
	}
	atFence, ask := "", n.Annotations
	if in.Failed != nil {
		atFence, ask = in.Failed.Status.BootIDAtFence, in.Failed.Annotations
	}
	if !rebootShown(atFence, n, ask) {
		return "marks cleared without a reboot shown"
	}
	_, owned := n.Annotations[names.OutOfServiceOwnerAnnotation]
	complete := false
	for _, c := range n.Status.Conditions {
		complete = complete || (string(c.Type) == names.FencingCompleteCondition && c.Status == v1.ConditionTrue)
	}
	if (owned || complete) && (in.VolumeAttachments > 0 || len(n.Status.VolumesInUse) > 0) {
		return "cut-off marks cleared with volumes left"
	}
	return ""
}

// provenByHand restates the proof rule without fencingreq, so that the
// invariant does not trust the code it checks.
func provenByHand(as []fencingv1alpha1.FenceAttempt, levels []fencingv1alpha1.FenceLevel, index int32) bool {
	for _, l := range levels {
		if l.Index != index || len(l.FenceClassNames) == 0 {
			continue
		}
		for _, c := range l.FenceClassNames {
			ok := false
			for _, a := range as {
				ok = ok || (a.Level == index && a.FenceClass == c && a.Result == succeeded && a.VerifiedPowerState == string(off))
			}
			if !ok {
				return false
			}
		}
		return true
	}
	return false
}

func readyCondition(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// TestDecideInvariants runs Decide over every combination of phase, node
// state, Lease, proof, volumes and policy variant, and checks the safety
// invariants on each outcome.
func TestDecideInvariants(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	phases := []fencingv1alpha1.FencingPhase{"", pending, triaged, fencing, fenced, recovering}
	up, rebooted := testobj.ReadySince(ago(time.Hour)), testobj.BootID("boot-2")
	nodes := map[string]*v1.Node{
		"deleted":               nil,
		"dead":                  testobj.Node("n1", testobj.UnknownSince(ago(time.Minute))),
		"up, same boot":         testobj.Node("n1", up),
		"up, new boot":          testobj.Node("n1", up, rebooted),
		"up 1 s, new boot":      testobj.Node("n1", testobj.ReadySince(ago(time.Second)), rebooted),
		"up, no boot ID":        testobj.Node("n1", up, testobj.BootID("")),
		"up, new boot, volumes": testobj.Node("n1", up, rebooted, testobj.VolumesInUse("v")),
		"recreated, up":         testobj.Node("n1", up, rebooted, testobj.NodeUID("uid-other")),
		"recreated, dead":       testobj.Node("n1", testobj.UnknownSince(ago(time.Minute)), testobj.NodeUID("uid-other")),
	}
	leases := map[string]*coordinationv1.Lease{"none": nil, "stale": testobj.Lease("n1", ago(time.Minute)), "fresh": testobj.Lease("n1", now)}
	proofs := map[string][]fencingv1alpha1.FenceAttempt{
		"none":       nil,
		"off":        {testobj.FenceAttempt(1, "bmc", succeeded, off)},
		"no read":    {testobj.FenceAttempt(1, "bmc", succeeded, "")},
		"failed off": {testobj.FenceAttempt(1, "bmc", fencingv1alpha1.FenceAttemptFailed, off)},
	}
	policies := map[string]*fencingv1alpha1.FencePolicy{
		"none": nil, "default": testobj.FencePolicy("p"), "manual": testobj.FencePolicy("p", testobj.ManualApproval(), testobj.ManualUnfence()), "no oos": testobj.FencePolicy("p", testobj.NoOutOfServiceTaint()),
	}
	n := 0
	for _, phase := range phases {
		for nodeName, node := range nodes {
			for leaseName, lease := range leases {
				for proofName, proof := range proofs {
					for polName, pol := range policies {
						for _, vas := range []int{0, 1} {
							for _, manual := range []bool{false, true} {
								opts := []testobj.RequestOption{testobj.InPhase(phase), testobj.BootIDAtFence("boot-1"), testobj.Attempts(proof...)}
								if manual {
									opts = append(opts, testobj.ByUser("ada"))
								}
								in := seenAtRenewal(Input{Node: node.DeepCopy(), Lease: lease, Policy: pol, Request: testobj.FencingRequest("n1", opts...), VolumeAttachments: vas, Now: now})
								d := Decide(in)
								n++
								if msg := brokenInvariant(in, d); msg != "" {
									t.Errorf("phase %q, node %s, lease %s, attempts %s, policy %s, %d VAs, manual %v: Decide() = %+v: %s",
										phase, nodeName, leaseName, proofName, polName, vas, manual, d, msg)
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d inputs checked", n)
}

// A manual request bound to a node's UID never fences another machine that
// registered under the same name.
func TestDecideManualRequestOfARecreatedNode(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	node := testobj.Node("n1", testobj.UnknownSince(now.Add(-time.Minute)), testobj.NodeUID("uid-n1-new"))
	for _, phase := range []fencingv1alpha1.FencingPhase{pending, triaged} {
		d := Decide(Input{Node: node, Lease: testobj.Lease("n1", now.Add(-time.Minute)), Policy: testobj.FencePolicy("p"),
			Request: testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.InPhase(phase), testobj.Approved(true)), Now: now})
		if d.Step != StepCancel || d.Reason != ReasonNodeRecreated {
			t.Errorf("manual %s request of uid-n1, node now uid-n1-new: Decide() = %s (%s), want Cancel (NodeRecreated)", phase, d.Step, d.Reason)
		}
	}
}

// testobj.FencingRequest builds this controller's automatic request: the
// builder names the requester literally (testobj imports no controller).
func TestFencingRequestBuilderIsAutomatic(t *testing.T) {
	if r := testobj.FencingRequest("n1"); !automatic(r) {
		t.Fatalf("testobj.FencingRequest requester = %q, want %q", r.Spec.Requester, RequesterController)
	}
	if r := testobj.FencingRequest("n1", testobj.ByUser("ada")); automatic(r) {
		t.Fatalf("testobj.ByUser request counts as automatic: %q", r.Spec.Requester)
	}
}
