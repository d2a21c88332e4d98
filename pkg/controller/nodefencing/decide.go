package nodefencing

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// RequesterController is spec.requester of the requests this controller
// creates; any other value (a human's "user:<name>") is a manual request.
const RequesterController = "controller"

// Step is the one write the controller makes next for a node.
type Step string

// The steps, in the order of docs/fencing.md's state table.
const (
	StepNone   Step = ""
	StepCreate Step = "Create" // create an automatic FencingRequest
	StepTriage Step = "Triage" // Pending → Triaged
	StepAdmit  Step = "Admit"  // Triaged → Fencing, if the storm guard admits
	// StepTriageAdmit is Triage and Admit in one step (Pending → Fencing,
	// if the storm guard admits), when the request would be admitted the
	// moment it is triaged: approved, not paused, settled. Each step is a
	// chain of round trips to the API server; one step instead of two
	// halves the chain on a slow one.
	StepTriageAdmit  Step = "TriageAdmit"
	StepFenced       Step = "Fenced"       // Fencing → Fenced: a level is proven
	StepFail         Step = "Fail"         // Fencing → Failed: maxAttempts rounds failed
	StepOutOfService Step = "OutOfService" // Fenced: add the out-of-service taint
	StepRecovering   Step = "Recovering"   // Fenced → Recovering: back with a new boot ID
	StepRecover      Step = "Recover"      // Recovering → Recovered: unfence
	StepCancel       Step = "Cancel"       // Pending/Triaged → Cancelled
	StepClear        Step = "Clear"        // no open request: remove the marks a Failed or deleted one left
	StepCheckPower   Step = "CheckPower"   // no open request: ask the fence agent to read the node's power (read-only)
)

// Reasons of a Decision that waits, for conditions, Events and logs.
const (
	ReasonInvalidPolicy    = "InvalidPolicy"
	ReasonNoPolicy         = "NoPolicy"
	ReasonNotCandidate     = "NotCandidate"
	ReasonEarlierFailure   = "EarlierRequestFailed"
	ReasonAwaitingApproval = "AwaitingApproval"
	// ReasonPaused: the policy is paused (spec.paused); no automatic fence
	// starts.
	ReasonPaused            = "PolicyPaused"
	ReasonAwaitingAgent     = "AwaitingFenceAgent"
	ReasonNodeHealthy       = "NodeHealthy"
	ReasonNodeDeleted       = "NodeDeleted"
	ReasonNodeRecreated     = "NodeRecreated"
	ReasonSameBootID        = "SameBootID"
	ReasonNodeDown          = "NodeNotReady"
	ReasonHealthyDelay      = "HealthyDelay"
	ReasonAttachmentsRemain = "VolumeAttachmentsRemain"
	ReasonVolumesInUse      = "VolumesInUse"
	ReasonManualUnfence     = "ManualUnfence"
	ReasonUnknownBootID     = "BootIDUnknown"
	ReasonDuplicate         = "Duplicate"
	ReasonSettling          = "Settling"
	// ReasonUnfenceRequested: an operator asked (names.UnfenceAnnotation).
	ReasonUnfenceRequested = "UnfenceRequested"
	// ReasonVerifiedByOperator: no boot ID could prove a reboot, and the
	// operator's ask states the machine was verified off or rebooted.
	ReasonVerifiedByOperator = "VerifiedByOperator"
	// ReasonExcluded: a manual request for a node labelled
	// detect.ExcludeLabel without names.OverrideExclusionAnnotation.
	ReasonExcluded = "ExcludedFromFencing"
	// ReasonMissedRenewal: the node missed a Lease renewal; its power is
	// read (StepCheckPower) or the answer is awaited.
	ReasonMissedRenewal = "MissedRenewal"
	// ReasonExternalDetection: the node is a candidate or missed a
	// renewal, but it is labelled detect.ExternalDetectionLabel: another
	// detector owns it, and no request is created for it here.
	ReasonExternalDetection = "ExternalDetection"
)

// Input is everything Decide reads about one node.
type Input struct {
	// Node is nil when it does not exist.
	Node *v1.Node
	// Lease is the node's Lease in kube-node-lease, nil when none.
	Lease *coordinationv1.Lease
	// LeaseObserved is when the controller, on its own clock, first saw
	// the Lease's current renewal; the Lease's age counts from it, never
	// from renewTime (the node's clock). Zero with a Lease counts as now.
	LeaseObserved time.Time
	// LeaseRenewed is true when that renewal was seen happen (a change the
	// controller watched), false when it is only the first sight of the
	// Lease since the controller started: a restart is no evidence that
	// the node renewed.
	LeaseRenewed bool
	// Policy is the node's resolved FencePolicy (ResolvePolicy), nil when
	// none; PolicyProblem says why it cannot be used ("" when it can).
	Policy        *fencingv1alpha1.FencePolicy
	PolicyProblem string
	// Request is the node's open (not terminal) request, nil when none.
	Request *fencingv1alpha1.FencingRequest
	// Blocked, when no request is open, is why none may be created: a
	// request of the node's current boot Failed, and only a human who
	// deletes it (or has its marks cleared) may start over.
	Blocked string
	// Failed is the node's newest Failed request whose marks were not
	// cleared, nil when none: its boot ID at fence time and the operator's
	// unfence ask on it decide when the marks it left may go.
	Failed *fencingv1alpha1.FencingRequest
	// Target is the node's FenceTarget, nil when it has none: where a power
	// check is asked (names.PowerCheckAnnotation) and answered.
	Target *fencingv1alpha1.FenceTarget
	// VolumeAttachments counts the VolumeAttachments for the node.
	VolumeAttachments int
	// Signs are the node's writes the controller observed since it saw
	// the request Fenced (JudgeFence).
	Signs LifeSigns
	// NetworkFence is the request's NetworkFences, read for a Fenced or
	// Recovering request.
	NetworkFence NetworkFenceInput
	Now          time.Time
}

// Decision is the outcome of Decide.
type Decision struct {
	Step Step
	// Reason is CamelCase (a detect or Reason* constant); Why says it in
	// words with the numbers.
	Reason, Why string
	// Level is the proven level for StepFenced.
	Level int32
	// RecheckAfter, when non-zero, is when the same inputs give another
	// answer (a Lease goes stale, a healthy delay ends).
	RecheckAfter time.Duration
	// Clearing: the decision is about the marks a Failed or deleted
	// request left on the node (StepClear, or why they stay).
	Clearing bool
	// NetworkFence is the NetworkFence StepNetworkFence creates.
	NetworkFence *networkfence.Spec
}

// SetRequests fills the input's requests from all of the node's
// FencingRequests: the open one the controller follows, why none may be
// created, and the Failed one whose marks are left. The controller's
// caches, its fresh reads and the kubectl plugin gather them alike.
func (in *Input) SetRequests(reqs []*fencingv1alpha1.FencingRequest) {
	in.Request, in.Blocked = openRequest(reqs, in.Node)
	in.Failed = failedRequest(reqs, in.Node)
}

// Decide is the single place that states the node-fencing lifecycle of
// docs/fencing.md. The controller calls it on cached data to choose a
// step, and again on data read fresh from the API server right before the
// write, which it makes only if the step is the same.
//
// Safety invariants:
//   - only a level proven by read-back Off attempts (fencingreq.ProvenLevel)
//     makes a request Fenced, and only a Fenced request gets the
//     out-of-service taint;
//   - a request in Fencing is never cancelled: a node that returns while it
//     is being fenced may have written while it looked dead;
//   - a node is unfenced only when it is Ready for the healthy delay with a
//     boot ID that is known and differs from the one at fence time, and no
//     VolumeAttachment and no volume in use is left for it;
//   - a Node recreated under the same name (another UID) is treated as
//     missing: nothing of the old machine's request touches it;
//   - an operator's ask (names.UnfenceAnnotation) changes only what this
//     function allows: it cancels a request not admitted yet, unfences by
//     hand where the policy says so, and stands in for a boot ID only
//     where none is known (rebooted); it never stops a fence in progress;
//   - marks a Failed or deleted request left are cleared only by the same
//     proof as an unfence (decideClear).
func Decide(in Input) Decision {
	node := in.Node
	if r := in.Request; r != nil && node != nil && r.Spec.NodeUID != "" && node.UID != r.Spec.NodeUID {
		node = nil
	}
	if in.Request == nil {
		return decideNew(in)
	}
	switch in.Request.Status.Phase {
	case "", fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged:
		return decideBeforeFence(in, node)
	case fencingv1alpha1.FencingPhaseFencing:
		return decideFencing(in)
	case fencingv1alpha1.FencingPhaseFenced:
		return decideFenced(in, node)
	case fencingv1alpha1.FencingPhaseRecovering:
		return decideRecovering(in, node)
	}
	return Decision{Why: fmt.Sprintf("request is %s", in.Request.Status.Phase)}
}

// decideNew: no open request; create one for a candidate, else clear the
// marks a Failed or deleted request left.
func decideNew(in Input) Decision {
	if in.Node == nil {
		return Decision{Why: "node does not exist"}
	}
	var v detect.Verdict
	if in.Policy != nil && in.PolicyProblem == "" {
		if v = detect.Unhealthy(in.Node, in.renewal(), DetectRules(in.Policy), in.Now); v.Candidate {
			if owner, ok := externalDetector(in.Node); ok {
				return Decision{Reason: ReasonExternalDetection, Why: fmt.Sprintf("%s; the node is labelled %s=%s: that detector's remediation fences it, node-fencing creates no request", v.Message, detect.ExternalDetectionLabel, owner)}
			}
			if in.Blocked != "" {
				return Decision{Reason: ReasonEarlierFailure, Why: in.Blocked}
			}
			if in.Policy.Spec.Paused {
				return Decision{Reason: ReasonPaused, Why: fmt.Sprintf("%s; FencePolicy %s is paused (spec.paused): no automatic fence starts until it is unpaused", v.Message, in.Policy.Name)}
			}
			return Decision{Step: StepCreate, Reason: v.Reason, Why: v.Message}
		}
	}
	if MarksOf(in.Node).Any() {
		return decideClear(in, v)
	}
	switch {
	case in.PolicyProblem != "":
		return Decision{Reason: ReasonInvalidPolicy, Why: in.PolicyProblem}
	case in.Policy == nil:
		return Decision{Reason: ReasonNoPolicy, Why: "no FencePolicy selects the node"}
	case v.CheckPower:
		if owner, ok := externalDetector(in.Node); ok {
			return Decision{Reason: ReasonExternalDetection, Why: fmt.Sprintf("the node missed its Lease renewal; it is labelled %s=%s, so its power is not checked here", detect.ExternalDetectionLabel, owner)}
		}
		return decideCheckPower(in, v)
	}
	return Decision{Reason: ReasonNotCandidate, Why: v.Message, RecheckAfter: v.RecheckAfter}
}

// externalDetector returns the detector a node is labelled with
// (detect.ExternalDetectionLabel; "another detector" for an empty value).
func externalDetector(n *v1.Node) (string, bool) {
	owner, ok := n.Labels[detect.ExternalDetectionLabel]
	if ok && owner == "" {
		owner = "another detector"
	}
	return owner, ok
}

// decideCheckPower: the node missed a Lease renewal and the policy reads
// its power then. The ask is made once per missed renewal (the token names
// it) on the node's FenceTarget; without one there is nothing to read and
// the node waits for its Lease to go stale, as it does while the answer is
// awaited or when the answer is not Off.
func decideCheckPower(in Input, v detect.Verdict) Decision {
	token := detect.PowerCheckToken(in.Lease)
	switch {
	case in.Target == nil:
		return Decision{Reason: ReasonMissedRenewal, RecheckAfter: v.RecheckAfter,
			Why: "the node missed its Lease renewal; it has no FenceTarget whose power could be read, so it waits for the Lease to go stale"}
	case in.Target.Annotations[names.PowerCheckAnnotation] != token:
		return Decision{Step: StepCheckPower, Reason: ReasonMissedRenewal, RecheckAfter: v.RecheckAfter,
			Why: "the node missed its Lease renewal: the fence agent is asked to read its power"}
	case in.Target.Status.PowerCheck == nil || in.Target.Status.PowerCheck.Token != token:
		return Decision{Reason: ReasonMissedRenewal, RecheckAfter: v.RecheckAfter,
			Why: "the node missed its Lease renewal; the fence agent has not answered the power check yet"}
	}
	return Decision{Reason: ReasonMissedRenewal, RecheckAfter: v.RecheckAfter,
		Why: fmt.Sprintf("the node missed its Lease renewal and its power reads %s, not Off: it waits for the Lease to go stale", in.Target.Status.PowerCheck.PowerState)}
}

// decideBeforeFence: Pending or Triaged.
func decideBeforeFence(in Input, node *v1.Node) Decision {
	r := in.Request
	if in.Node != nil && node == nil {
		// Whoever asked, a request bound to a node's UID never fences
		// another machine that registered under the same name.
		return Decision{Step: StepCancel, Reason: ReasonNodeRecreated, Why: "the node was recreated (another UID) before it was fenced"}
	}
	if ask := AskOf(r.Annotations); ask.Asked() {
		// Not admitted yet: nothing was done to the machine, so the ask
		// alone cancels, whoever made the request.
		return Decision{Step: StepCancel, Reason: ReasonUnfenceRequested, Why: ask.Requester + " asked to cancel the fence before it was admitted"}
	}
	var verdict detect.Verdict
	if automatic(r) {
		v, d, cancel := cancelAutomatic(in, node)
		if cancel {
			return d
		}
		verdict = v
	} else if excluded(node) && !overridesExclusion(r) {
		return Decision{Reason: ReasonExcluded, Why: fmt.Sprintf("the node is labelled %s: a manual request fences it only with the annotation %s (kubectl fenceline fence --override-exclusion)", detect.ExcludeLabel, names.OverrideExclusionAnnotation)}
	}
	if in.PolicyProblem != "" || in.Policy == nil {
		why := in.PolicyProblem
		if why == "" {
			why = "no FencePolicy applies to the request"
		}
		return Decision{Reason: ReasonInvalidPolicy, Why: why}
	}
	admission := decideAdmission(in, verdict)
	if r.Status.Phase == fencingv1alpha1.FencingPhaseTriaged {
		return admission
	}
	if admission.Step == StepAdmit {
		return Decision{Step: StepTriageAdmit, Reason: r.Spec.Reason, Why: "the request, its node, policy and fence classes are valid, it is approved and the node's state has settled: triaged and admitted at once, if the storm guard admits"}
	}
	return triageDecision(r)
}

// triageDecision is StepTriage for the request.
func triageDecision(r *fencingv1alpha1.FencingRequest) Decision {
	return Decision{Step: StepTriage, Reason: r.Spec.Reason, Why: "the request, its node, policy and fence classes are valid"}
}

// decideAdmission: a valid request, triaged or about to be, is admitted
// once approved, not paused and settled.
func decideAdmission(in Input, verdict detect.Verdict) Decision {
	r := in.Request
	if automatic(r) && r.Spec.Approved == nil && in.Policy.Spec.Paused {
		return Decision{Reason: ReasonPaused, Why: fmt.Sprintf("FencePolicy %s is paused (spec.paused): the automatic request waits until it is unpaused, or until an operator approves it", in.Policy.Name)}
	}
	if !approved(r, in.Policy) {
		return Decision{Reason: ReasonAwaitingApproval, Why: fmt.Sprintf("FencePolicy %s asks for manual approval: set spec.approved to true to fence", in.Policy.Name)}
	}
	if verdict.Reason == detect.ReasonLeaseExpired {
		if left := verdict.Since.Add(detect.SettleDelay(in.Lease)).Sub(in.Now); left > 0 {
			return Decision{Reason: ReasonSettling, RecheckAfter: left,
				Why: fmt.Sprintf("the Lease went stale %s ago; waiting %s more so that nodes that stopped at the same moment are seen too", in.Now.Sub(verdict.Since).Round(time.Millisecond), left.Round(time.Millisecond))}
		}
	}
	return Decision{Step: StepAdmit, Reason: r.Spec.Reason, Why: "approved; the storm guard decides"}
}

// cancelAutomatic cancels an automatic request whose node is gone or no
// longer a candidate, and otherwise returns the node's verdict. A manual
// request is a human's decision and stays.
func cancelAutomatic(in Input, node *v1.Node) (detect.Verdict, Decision, bool) {
	switch {
	case node == nil:
		return detect.Verdict{}, Decision{Step: StepCancel, Reason: ReasonNodeDeleted, Why: "the node was deleted before it was fenced"}, true
	case in.Policy == nil:
		return detect.Verdict{}, Decision{}, false
	}
	v := detect.Unhealthy(node, in.renewal(), DetectRules(in.Policy), in.Now)
	switch {
	case v.Candidate:
		return v, Decision{}, false
	case in.Lease != nil && !in.LeaseRenewed && !nodeutil.IsReady(node):
		// A restarted controller starts each Lease's clock afresh, so the
		// node is not a candidate again yet; but nothing showed it alive:
		// the request waits, neither admitted nor cancelled, until the
		// node is seen renewing (then it is cancelled) or stale again.
		return v, Decision{Reason: ReasonAwaitingRenewal, RecheckAfter: v.RecheckAfter,
			Why: "the node's Lease has not been seen renewed since this controller started, nor stale for its duration yet: " + v.Message}, true
	}
	return v, Decision{Step: StepCancel, Reason: ReasonNodeHealthy, Why: "the node is no longer a fencing candidate: " + v.Message}, true
}

// ReasonAwaitingRenewal: an open request waits after a controller restart
// until the node's Lease is seen renewed (cancel) or stale (go on).
const ReasonAwaitingRenewal = "AwaitingLeaseObservation"

// decideFencing: the fence agent works; a proven level or the last failed
// round ends it.
func decideFencing(in Input) Decision {
	r := in.Request
	var levels []fencingv1alpha1.FenceLevel
	if in.Policy != nil {
		levels = in.Policy.Spec.Levels
	}
	if level, ok := fencingreq.ProvenLevel(r.Status.Attempts, levels); ok {
		return Decision{Step: StepFenced, Level: level, Reason: fmt.Sprintf("Level%dVerified", level), Why: fmt.Sprintf("every fence class of level %d read the power back Off", level)}
	}
	if max := MaxAttempts(in.Policy); int(r.Status.FailedRounds) >= max {
		return Decision{Step: StepFail, Reason: "MaxAttemptsReached", Why: fmt.Sprintf("%d rounds through every level failed, maxAttempts is %d; last: %s; the node is not known to be off and nothing is recovered", r.Status.FailedRounds, max, LastFailure(r.Status.Attempts))}
	}
	if in.Policy == nil {
		return Decision{Reason: ReasonInvalidPolicy, Why: "the request's FencePolicy is gone: no level can be proven, the node stays fencing"}
	}
	return Decision{Reason: ReasonAwaitingAgent, Why: fmt.Sprintf("%d failed rounds of %d; waiting for the fence agent", r.Status.FailedRounds, MaxAttempts(in.Policy))}
}

// decideFenced: put the node out of service, and notice its return.
func decideFenced(in Input, node *v1.Node) Decision {
	r := in.Request
	if node == nil || in.Policy == nil {
		return Decision{Why: "node or policy gone: the node stays fenced"}
	}
	nd, hold := decideNetworkFences(in, node)
	if nd.Step != StepNone {
		return nd
	}
	if AppliesOutOfService(in.Policy) && !nodeutil.HasTaint(node, outOfServiceTaint.Key) && !OwnsOutOfService(node, r) {
		if hold {
			return nd
		}
		return Decision{Step: StepOutOfService, Reason: "Fenced", Why: "the node is fenced (power read back Off): its pods and volumes may go"}
	}
	// Not Ready, Ready only as reported before the fence, or alive with the
	// fenced boot ID (a lying fence): JudgeFence, on observed changes.
	if d, hold := fencedNode(in, node); hold {
		return d
	}
	ok, reason, why := rebooted(r.Status.BootIDAtFence, node.Status.NodeInfo.BootID, AskOf(r.Annotations))
	if !ok {
		return Decision{Reason: reason, Why: why + "; it stays fenced"}
	}
	return Decision{Step: StepRecovering, Reason: reason, Why: why}
}

// decideRecovering: unfence once nothing of the old boot is left.
func decideRecovering(in Input, node *v1.Node) Decision {
	r := in.Request
	switch {
	case node == nil || in.Policy == nil:
		return Decision{Why: "node or policy gone: the node stays fenced"}
	case !nodeutil.IsReady(node):
		return Decision{Reason: ReasonNodeDown, Why: "the node is not Ready"}
	}
	ask := AskOf(r.Annotations)
	if ok, reason, why := rebooted(r.Status.BootIDAtFence, node.Status.NodeInfo.BootID, ask); !ok {
		return Decision{Reason: reason, Why: why}
	}
	if left := readyLeft(node, HealthyDelay(in.Policy), in.Now); left > 0 {
		return Decision{Reason: ReasonHealthyDelay, Why: fmt.Sprintf("the node must be Ready for %s; %s left", HealthyDelay(in.Policy), left.Round(time.Millisecond)), RecheckAfter: left}
	}
	switch {
	case in.VolumeAttachments > 0:
		return Decision{Reason: ReasonAttachmentsRemain, Why: fmt.Sprintf("%d VolumeAttachments are left for the node", in.VolumeAttachments)}
	case len(node.Status.VolumesInUse) > 0:
		return Decision{Reason: ReasonVolumesInUse, Why: fmt.Sprintf("the node reports %d volumes in use: its storage clean-up has not run", len(node.Status.VolumesInUse))}
	case !UnfencesOnNewBoot(in.Policy) && !ask.Asked():
		return Decision{Reason: ReasonManualUnfence, Why: fmt.Sprintf("FencePolicy %s unfences by hand: run kubectl fenceline unfence %s", in.Policy.Name, r.Spec.NodeName)}
	}
	if d, wait := decideNetworkUnfence(in); wait {
		return d
	}
	switch {
	case !UnfencesOnNewBoot(in.Policy):
		return Decision{Step: StepRecover, Reason: "Unfenced", Why: ask.Requester + " asked, the node rebooted, is Ready, and no VolumeAttachment or volume in use is left"}
	}
	return Decision{Step: StepRecover, Reason: "Unfenced", Why: "the node rebooted, is Ready, and no VolumeAttachment or volume in use is left"}
}

// automatic reports whether the controller created the request.
func automatic(r *fencingv1alpha1.FencingRequest) bool {
	return r.Spec.Requester == RequesterController
}

// approved: spec.approved decides when set; otherwise the policy.
func approved(r *fencingv1alpha1.FencingRequest, p *fencingv1alpha1.FencePolicy) bool {
	if r.Spec.Approved != nil {
		return *r.Spec.Approved
	}
	return AutomaticApproval(p)
}

// OwnsOutOfService reports whether the node's out-of-service taint was put
// there for the request: the owner annotation names the request's UID.
func OwnsOutOfService(node *v1.Node, r *fencingv1alpha1.FencingRequest) bool {
	return node != nil && r != nil && r.UID != "" && node.Annotations[ownerAnnotation] == string(r.UID)
}
