package executor

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
)

// Action is what the executor does next for a request.
type Action string

// The actions of a Decision.
const (
	// ActionNone: nothing to do (not this agent's turn, or already over).
	ActionNone Action = "None"
	// ActionRefuse: the request must not be fenced as it stands; nothing
	// is done, and the reason is reported.
	ActionRefuse Action = "Refuse"
	// ActionMarkInterrupted: an attempt has a start and no end; it ended
	// with the agent that ran it and is marked Failed.
	ActionMarkInterrupted Action = "MarkInterrupted"
	// ActionRetryAfter: a round failed; the next waits for the backoff.
	ActionRetryAfter Action = "RetryAfter"
	// ActionRunRound: run the policy's levels in order.
	ActionRunRound Action = "RunRound"
)

// Reasons of a Decision, CamelCase, for logs and Events.
const (
	ReasonInterrupted       = "AttemptInterrupted"
	ReasonNotFencing        = "NotFencing"
	ReasonNotRequired       = "NotRequired"
	ReasonNodeRecreated     = "NodeRecreated"
	ReasonPolicyNotFound    = "PolicyNotFound"
	ReasonUnsupportedAction = "UnsupportedAction"
	ReasonProven            = "LevelProven"
	ReasonMaxAttempts       = "MaxAttemptsReached"
	ReasonBackoff           = "Backoff"
	ReasonFence             = "Fence"
)

// InterruptedMessage is the message of an attempt found unfinished: the
// agent that started it stopped before it could record the end.
const InterruptedMessage = "interrupted: the fence agent restarted"

// Backoff between two rounds: BaseBackoff after the first failed round,
// doubled after each further one, at most MaxBackoff.
const (
	BaseBackoff = 2 * time.Second
	MaxBackoff  = 60 * time.Second
)

// DefaultMaxAttempts is the CRD's default of stormGuard.maxAttempts, for a
// policy read without it (fencingreq.DefaultMaxAttempts).
const DefaultMaxAttempts = fencingreq.DefaultMaxAttempts

// Decision is what to do next for a request.
type Decision struct {
	Action Action
	// Reason is CamelCase; Message says it in words.
	Reason, Message string
	// RetryAfter is the wait of ActionRetryAfter.
	RetryAfter time.Duration
}

// Decide is the single place that says what the executor does next for
// req, given its policy and its Node (nil when missing) at now. It is pure.
//
// Safety rules:
//   - it acts only on a request in phase Fencing with condition
//     Required=True that no level has proven yet and that has failed fewer
//     rounds than the policy's maxAttempts;
//   - a Node recreated under the request's node name (another UID) is
//     never fenced; a missing Node does not stop the fence: a deleted Node
//     object proves nothing about the machine;
//   - without its policy, or with an action other than Off and Reboot
//     (empty is the API's default, Off), it refuses.
func Decide(req *fencingv1alpha1.FencingRequest, policy *fencingv1alpha1.FencePolicy, node *corev1.Node, now time.Time) Decision {
	if n := unfinished(req.Status.Attempts); n > 0 {
		return Decision{Action: ActionMarkInterrupted, Reason: ReasonInterrupted,
			Message: fmt.Sprintf("%d attempt(s) started and never ended", n)}
	}
	if req.Status.Phase != fencingv1alpha1.FencingPhaseFencing {
		return Decision{Action: ActionNone, Reason: ReasonNotFencing, Message: fmt.Sprintf("phase is %q", req.Status.Phase)}
	}
	if !meta.IsStatusConditionTrue(req.Status.Conditions, fencingv1alpha1.FencingRequestRequired) {
		return Decision{Action: ActionNone, Reason: ReasonNotRequired, Message: "condition Required is not True"}
	}
	if uid := req.Spec.NodeUID; uid != "" && node != nil && node.UID != uid {
		return Decision{Action: ActionRefuse, Reason: ReasonNodeRecreated,
			Message: fmt.Sprintf("Node %s has UID %s, the request is for UID %s: it was recreated and the new machine is never fenced by this request", node.Name, node.UID, uid)}
	}
	if policy == nil {
		return Decision{Action: ActionRefuse, Reason: ReasonPolicyNotFound, Message: policyNotFound(req)}
	}
	switch req.Spec.Action {
	case "", fencingv1alpha1.FenceActionOff, fencingv1alpha1.FenceActionReboot:
	default:
		return Decision{Action: ActionRefuse, Reason: ReasonUnsupportedAction, Message: fmt.Sprintf("action %q is neither Off nor Reboot", req.Spec.Action)}
	}
	if level, ok := LevelProven(req, policy); ok {
		return Decision{Action: ActionNone, Reason: ReasonProven, Message: fmt.Sprintf("level %d is proven: every class read back Off", level)}
	}
	if limit := MaxAttempts(policy); req.Status.FailedRounds >= limit {
		return Decision{Action: ActionNone, Reason: ReasonMaxAttempts, Message: fmt.Sprintf("%d of %d rounds failed", req.Status.FailedRounds, limit)}
	}
	if req.Status.FailedRounds > 0 {
		if end := lastEnd(req.Status.Attempts); !end.IsZero() {
			if wait := end.Add(Backoff(req.Status.FailedRounds)).Sub(now); wait > 0 {
				return Decision{Action: ActionRetryAfter, Reason: ReasonBackoff, RetryAfter: wait,
					Message: fmt.Sprintf("%d round(s) failed; the next starts in %v", req.Status.FailedRounds, wait.Round(time.Millisecond))}
			}
		}
	}
	return Decision{Action: ActionRunRound, Reason: ReasonFence, Message: fmt.Sprintf("round %d of at most %d", req.Status.FailedRounds+1, MaxAttempts(policy))}
}

// LevelProven returns the first level of the policy for which every
// FenceClass has a Succeeded attempt with power read back Off: the proof
// that the node is fenced. It is fencingreq.ProvenLevel, the reading the
// controller shares. A nil policy proves nothing.
func LevelProven(req *fencingv1alpha1.FencingRequest, policy *fencingv1alpha1.FencePolicy) (level int32, ok bool) {
	if req == nil || policy == nil {
		return 0, false
	}
	return fencingreq.ProvenLevel(req.Status.Attempts, policy.Spec.Levels)
}

// MaxAttempts is the number of failed rounds after which the controller
// fails a request of policy (stormGuard.maxAttempts, default 5).
func MaxAttempts(policy *fencingv1alpha1.FencePolicy) int32 {
	return int32(fencingreq.MaxAttempts(policy))
}

// Backoff is the wait after failedRounds failed rounds:
// BaseBackoff * 2^(failedRounds-1), at most MaxBackoff; zero before the
// first failure.
func Backoff(failedRounds int32) time.Duration {
	if failedRounds <= 0 {
		return 0
	}
	d := BaseBackoff
	for i := int32(1); i < failedRounds && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// unfinished counts the attempts with no end.
func unfinished(attempts []fencingv1alpha1.FenceAttempt) int {
	n := 0
	for _, a := range attempts {
		if running(a) {
			n++
		}
	}
	return n
}

// running: the attempt was started and its end is not recorded.
func running(a fencingv1alpha1.FenceAttempt) bool { return a.EndTime == nil && a.Result == "" }

// lastEnd is the latest end of an attempt; zero when none ended.
func lastEnd(attempts []fencingv1alpha1.FenceAttempt) time.Time {
	var last time.Time
	for _, a := range attempts {
		if a.EndTime != nil && a.EndTime.After(last) {
			last = a.EndTime.Time
		}
	}
	return last
}

func policyNotFound(req *fencingv1alpha1.FencingRequest) string {
	if req.Spec.PolicyName != "" {
		return fmt.Sprintf("FencePolicy %q does not exist", req.Spec.PolicyName)
	}
	return fmt.Sprintf("the request names no FencePolicy and none (or more than one) selects node %s", req.Spec.NodeName)
}
