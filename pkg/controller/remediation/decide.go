package remediation

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/names"
)

// Annotations and labels of the external-remediation contract
// (medik8s/common pkg/annotations) and Fenceline's own.
const (
	// NodeNameAnnotation names the node when a NodeHealthCheck could not
	// name the remediation after it (a template with the annotation
	// remediation.medik8s.io/multiple-templates-support).
	NodeNameAnnotation = "remediation.medik8s.io/node-name"
	// TimedOutAnnotation is set by NodeHealthCheck when the remediation's
	// timeout expired or it failed, before NHC escalates to the next
	// remediator: the remediator is to stop.
	TimedOutAnnotation = "remediation.medik8s.io/nhc-timed-out"
	// Finalizer keeps a remediation until the controller has cancelled
	// the FencingRequest it created, if that was not admitted yet.
	Finalizer = names.Domain + "/remediation"
	// RemediationUIDLabel, on a FencingRequest, is the UID of the
	// FencelineRemediation that created it, so that the request is found
	// even when the remediation's status could not record its name.
	RemediationUIDLabel = names.Domain + "/remediation-uid"
	// ReasonExternalRemediation is spec.reason of the requests it creates.
	ReasonExternalRemediation = "ExternalRemediation"
)

// Requester is spec.requester of the FencingRequest a remediation creates:
// "remediation:<namespace>/<name>".
func Requester(r *fencingv1alpha1.FencelineRemediation) string {
	return "remediation:" + r.Namespace + "/" + r.Name
}

// Action is the one write a sync makes to the FencingRequest or to the
// remediation's finalizers.
type Action string

// The actions, each re-decided on fresh reads right before it is taken.
const (
	// ActNone writes nothing but the status.
	ActNone Action = ""
	// ActAddFinalizer records the finalizer before any request exists.
	ActAddFinalizer Action = "AddFinalizer"
	// ActCreate creates the approved FencingRequest for the node.
	ActCreate Action = "Create"
	// ActCancel asks node-fencing to cancel the remediation's request,
	// which was not admitted yet (names.UnfenceAnnotation).
	ActCancel Action = "Cancel"
	// ActRemoveFinalizer lets a deleted remediation go.
	ActRemoveFinalizer Action = "RemoveFinalizer"
)

// Input is what the decision reads about one remediation.
type Input struct {
	// Remediation is the object, never nil.
	Remediation *fencingv1alpha1.FencelineRemediation
	// NodeName is the node it is for; "" when it is not known (a Machine
	// without status.nodeRef), NodeProblem then says why.
	NodeName    string
	NodeProblem string
	// Node is the node named NodeName, nil when there is none.
	Node *v1.Node
	// Requests are the FencingRequests of the node (names.FencingRequestNodeLabel)
	// and those labelled with the remediation's UID.
	Requests []*fencingv1alpha1.FencingRequest
}

// Decision is what to do and why.
type Decision struct {
	Action Action
	Why    string
	// Request is the request the remediation follows: its own, or the
	// node's open request of another requester. Nil when there is none.
	Request *fencingv1alpha1.FencingRequest
}

// Owns reports whether the remediation created the request.
func Owns(r *fencingv1alpha1.FencelineRemediation, req *fencingv1alpha1.FencingRequest) bool {
	return req.Labels[RemediationUIDLabel] == string(r.UID) && req.Spec.Requester == Requester(r)
}

// Followed returns the request a remediation follows: its own, newest first
// (there is at most one, the controller creates one only when it finds
// none), or else the node's open request whoever made it: a second request
// for a node with an open one would only be cancelled as a duplicate.
func Followed(in Input) *fencingv1alpha1.FencingRequest {
	var open *fencingv1alpha1.FencingRequest
	for _, req := range in.Requests {
		if Owns(in.Remediation, req) {
			return req
		}
		if req.Spec.NodeName == in.NodeName && in.NodeName != "" && !fencingreq.Terminal(req.Status.Phase) && open == nil {
			open = req
		}
	}
	return open
}

// admitted reports whether node-fencing has started the fence: from then
// on the request is left alone, whatever becomes of the remediation.
func admitted(req *fencingv1alpha1.FencingRequest) bool {
	switch req.Status.Phase {
	case "", fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged:
		return false
	}
	return true
}

// Decide states every precondition of the controller's writes: when a
// FencingRequest is created, when the remediation's own request is asked to
// be cancelled, and when the finalizer is added and removed. It is called
// on the informers' caches, and again on fresh reads right before the
// write, which is made only if the fresh decision is the same.
//
//   - A remediation being deleted cancels its own request if node-fencing
//     has not admitted it (Pending, Triaged) and then lets the finalizer
//     go; a fence in progress or done is never stopped, and a request of
//     another requester is never touched.
//   - Without the finalizer nothing else is done: it is recorded first.
//   - A remediation that NodeHealthCheck timed out creates nothing, and
//     cancels its own request if it was not admitted.
//   - A request is created only for a node that exists and has no request
//     the remediation follows (its own in any phase, or another open one):
//     a terminal request of its own is never replaced, the health checker
//     escalates instead.
func Decide(in Input) Decision {
	r := in.Remediation
	req := Followed(in)
	d := Decision{Request: req}
	own := req != nil && Owns(r, req)
	_, timedOut := r.Annotations[TimedOutAnnotation]
	switch {
	case r.DeletionTimestamp != nil:
		if !hasFinalizer(r) {
			d.Why = "the remediation is being deleted and holds no finalizer of Fenceline's"
			return d
		}
		if own && !admitted(req) && !asked(req) {
			d.Action, d.Why = ActCancel, fmt.Sprintf("the remediation is being deleted before FencingRequest %s was admitted", req.Name)
			return d
		}
		d.Action = ActRemoveFinalizer
		switch {
		case req == nil:
			d.Why = "the remediation is being deleted and no FencingRequest of it exists"
		case !own:
			d.Why = fmt.Sprintf("the remediation is being deleted; FencingRequest %s is not its own and is left alone", req.Name)
		case admitted(req):
			d.Why = fmt.Sprintf("the remediation is being deleted; FencingRequest %s is %s and is left to finish", req.Name, req.Status.Phase)
		default:
			d.Why = fmt.Sprintf("the remediation is being deleted; FencingRequest %s was asked to cancel", req.Name)
		}
		return d
	case !hasFinalizer(r):
		d.Action, d.Why = ActAddFinalizer, "the finalizer is recorded before any FencingRequest is created"
		return d
	case timedOut:
		if own && !admitted(req) && !asked(req) {
			d.Action, d.Why = ActCancel, fmt.Sprintf("the health checker timed the remediation out (%s) before FencingRequest %s was admitted", TimedOutAnnotation, req.Name)
			return d
		}
		d.Why = fmt.Sprintf("the health checker timed the remediation out (%s): nothing new is started, a fence in progress is left to finish", TimedOutAnnotation)
		return d
	case req != nil:
		d.Why = fmt.Sprintf("follows FencingRequest %s (%s)", req.Name, phaseOf(req))
		return d
	case in.NodeName == "":
		d.Why = "the node is not known: " + in.NodeProblem
		return d
	case in.Node == nil:
		d.Why = fmt.Sprintf("no Node %s exists", in.NodeName)
		return d
	}
	d.Action, d.Why = ActCreate, fmt.Sprintf("the health checker asks for node %s to be remediated and no FencingRequest of it is open", in.NodeName)
	return d
}

func hasFinalizer(r *fencingv1alpha1.FencelineRemediation) bool {
	return slices.Contains(r.Finalizers, Finalizer)
}

func asked(req *fencingv1alpha1.FencingRequest) bool {
	_, ok := req.Annotations[names.UnfenceAnnotation]
	return ok
}

func phaseOf(req *fencingv1alpha1.FencingRequest) fencingv1alpha1.FencingPhase {
	if req.Status.Phase == "" {
		return fencingv1alpha1.FencingPhasePending
	}
	return req.Status.Phase
}

// Reasons of the remediation's conditions.
const (
	ReasonStarting         = "Starting"
	ReasonNodeUnknown      = "NodeUnknown"
	ReasonTimedOut         = "TimedOut"
	ReasonAwaitingRelease  = "AwaitingOutOfService"
	ReasonNodeFenced       = "NodeFenced"
	ReasonFencingFailed    = "FencingFailed"
	ReasonFencingCancelled = "FencingCancelled"
	ReasonInProgress       = "InProgress"
)

// Status is the remediation's status for the decision's request: the
// contract's conditions and the request's name and phase. Succeeded is
// True only once the node is fenced (power read back Off) and its
// workloads may go (the request's OutOfServiceApplied=True, or the request
// moved on to Recovering or Recovered); False once the request Failed or
// was Cancelled, which NodeHealthCheck takes as the signal to escalate;
// Unknown before. Processing is True until Succeeded is known.
func Status(in Input, d Decision) fencingv1alpha1.FencelineRemediationStatus {
	s := fencingv1alpha1.FencelineRemediationStatus{NodeName: in.NodeName}
	processing := func(st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: fencingv1alpha1.RemediationProcessing, Status: st, Reason: reason, Message: msg}
	}
	succeeded := func(st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: fencingv1alpha1.RemediationSucceeded, Status: st, Reason: reason, Message: msg}
	}
	req := d.Request
	if req == nil {
		_, timedOut := in.Remediation.Annotations[TimedOutAnnotation]
		switch {
		case timedOut:
			s.Conditions = []metav1.Condition{processing(metav1.ConditionFalse, ReasonTimedOut, d.Why), succeeded(metav1.ConditionUnknown, ReasonTimedOut, d.Why)}
		case in.NodeName == "" || in.Node == nil:
			s.Conditions = []metav1.Condition{processing(metav1.ConditionTrue, ReasonNodeUnknown, d.Why), succeeded(metav1.ConditionUnknown, ReasonNodeUnknown, d.Why)}
		default:
			s.Conditions = []metav1.Condition{processing(metav1.ConditionTrue, ReasonStarting, d.Why), succeeded(metav1.ConditionUnknown, ReasonStarting, d.Why)}
		}
		return s
	}
	s.FencingRequestName, s.Phase = req.Name, phaseOf(req)
	msg := fmt.Sprintf("FencingRequest %s is %s", req.Name, s.Phase)
	switch s.Phase {
	case fencingv1alpha1.FencingPhaseFenced:
		if !meta.IsStatusConditionTrue(req.Status.Conditions, fencingv1alpha1.FencingRequestOutOfServiceApplied) {
			msg += ": the power is read back Off, the node's workloads are not released yet (no out-of-service taint)"
			s.Conditions = []metav1.Condition{processing(metav1.ConditionTrue, ReasonAwaitingRelease, msg), succeeded(metav1.ConditionUnknown, ReasonAwaitingRelease, msg)}
			return s
		}
		fallthrough
	case fencingv1alpha1.FencingPhaseRecovering, fencingv1alpha1.FencingPhaseRecovered:
		msg += ": the node was fenced (power read back Off) and put out of service"
		s.Conditions = []metav1.Condition{processing(metav1.ConditionFalse, ReasonNodeFenced, msg), succeeded(metav1.ConditionTrue, ReasonNodeFenced, msg)}
	case fencingv1alpha1.FencingPhaseFailed:
		s.Conditions = []metav1.Condition{processing(metav1.ConditionFalse, ReasonFencingFailed, failMessage(msg, req)), succeeded(metav1.ConditionFalse, ReasonFencingFailed, failMessage(msg, req))}
	case fencingv1alpha1.FencingPhaseCancelled:
		s.Conditions = []metav1.Condition{processing(metav1.ConditionFalse, ReasonFencingCancelled, failMessage(msg, req)), succeeded(metav1.ConditionFalse, ReasonFencingCancelled, failMessage(msg, req))}
	default:
		s.Conditions = []metav1.Condition{processing(metav1.ConditionTrue, ReasonInProgress, msg), succeeded(metav1.ConditionUnknown, ReasonInProgress, msg)}
	}
	return s
}

// failMessage adds the request's own account of its end.
func failMessage(msg string, req *fencingv1alpha1.FencingRequest) string {
	var parts []string
	if req.Status.ErrorReason != "" {
		parts = append(parts, req.Status.ErrorReason)
	}
	if req.Status.ErrorMessage != "" {
		parts = append(parts, req.Status.ErrorMessage)
	}
	if len(parts) == 0 {
		return msg
	}
	return msg + ": " + strings.Join(parts, ": ")
}
