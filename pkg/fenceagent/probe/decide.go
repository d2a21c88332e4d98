package probe

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// maxMessage bounds the condition message (the API allows 32768 bytes).
const maxMessage = 1024

// EndpointResult is the probe of one endpoint: the state read, or the
// (already scrubbed) error that prevented it.
type EndpointResult struct {
	FenceClassName string
	State          power.State
	Err            error
}

// Transition is the change of the Reachable condition a probe made.
type Transition int

// The transitions that record an Event.
const (
	NoTransition Transition = iota
	// BecameUnreachable: first probe failed, True → False, or a new
	// reason for False.
	BecameUnreachable
	// BecameReachable: False → True.
	BecameReachable
)

// Decision is what a probe changes on a FenceTarget.
type Decision struct {
	// Status is the new status; Write says whether to write it.
	Status     fencingv1alpha1.FenceTargetStatus
	Write      bool
	Transition Transition
	// Reason and Message are the Reachable condition's.
	Reason, Message string
}

// Decide turns the results of one probe into the target's next status.
// ask is the power check asked on the target when the probe began (its
// annotation's value, "" for none): the state read answers it, since every
// read was made after the ask was seen. It writes when the condition, the
// power state, the answer or the observed generation changed, or, when
// nothing did, when the last probe time is at least interval old, so an
// unchanged target is written at most once per interval.
func Decide(old fencingv1alpha1.FenceTargetStatus, generation int64, ask string, results []EndpointResult, now time.Time, interval time.Duration) Decision {
	reason, message := summarize(results)
	status := metav1.ConditionTrue
	if reason != devices.ReasonReachable {
		status = metav1.ConditionFalse
	}
	next := *old.DeepCopy()
	next.ObservedGeneration = generation
	next.PowerState = powerState(results)
	if ask != "" {
		next.PowerCheck = &fencingv1alpha1.FencePowerCheck{Token: ask, PowerState: next.PowerState}
	}
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{
		Type: fencingv1alpha1.FenceTargetReachable, Status: status, Reason: reason, Message: message,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	})
	d := Decision{Reason: reason, Message: message}
	prev := meta.FindStatusCondition(old.Conditions, fencingv1alpha1.FenceTargetReachable)
	switch {
	case status == metav1.ConditionFalse && (prev == nil || prev.Status != metav1.ConditionFalse || prev.Reason != reason):
		d.Transition = BecameUnreachable
	case status == metav1.ConditionTrue && prev != nil && prev.Status == metav1.ConditionFalse:
		d.Transition = BecameReachable
	}
	changed := !equality.Semantic.DeepEqual(withoutProbeTime(old), withoutProbeTime(next))
	stale := old.LastProbeTime == nil || now.Sub(old.LastProbeTime.Time) >= interval
	if changed || stale {
		t := metav1.NewTime(now)
		next.LastProbeTime = &t
		d.Write = true
	}
	d.Status = next
	return d
}

// withoutProbeTime is s without the field every probe changes.
func withoutProbeTime(s fencingv1alpha1.FenceTargetStatus) fencingv1alpha1.FenceTargetStatus {
	s.LastProbeTime = nil
	return s
}

// summarize is the condition's reason (the first failed endpoint's, or
// Reachable) and message.
func summarize(results []EndpointResult) (reason, message string) {
	reason = devices.ReasonReachable
	var failed []string
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		if reason == devices.ReasonReachable {
			reason = devices.Reason(r.Err)
		}
		failed = append(failed, fmt.Sprintf("endpoint %s: %v", r.FenceClassName, r.Err))
	}
	if len(results) == 0 {
		return devices.ReasonInvalidConfiguration, "no endpoints"
	}
	if len(failed) == 0 {
		return reason, fmt.Sprintf("%d of %d endpoints answered a power-status query", len(results), len(results))
	}
	message = strings.Join(failed, "; ")
	if len(message) > maxMessage {
		message = message[:maxMessage-3] + "..."
	}
	return reason, message
}

// powerState is the state every endpoint agrees on; Unknown when one did
// not answer or they disagree. A node behind two supplies is off only when
// both read Off: one silent endpoint must not make it look off.
func powerState(results []EndpointResult) fencingv1alpha1.PowerState {
	state := fencingv1alpha1.PowerStateUnknown
	seen := false
	for _, r := range results {
		if r.Err != nil {
			return fencingv1alpha1.PowerStateUnknown
		}
		s := apiState(r.State)
		if seen && s != state {
			return fencingv1alpha1.PowerStateUnknown
		}
		state, seen = s, true
	}
	return state
}

func apiState(s power.State) fencingv1alpha1.PowerState {
	switch s {
	case power.StateOn:
		return fencingv1alpha1.PowerStateOn
	case power.StateOff:
		return fencingv1alpha1.PowerStateOff
	}
	return fencingv1alpha1.PowerStateUnknown
}
