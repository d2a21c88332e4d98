package probe

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const interval = time.Minute
	ok := func(class string, s power.State) EndpointResult {
		return EndpointResult{FenceClassName: class, State: s}
	}
	fail := func(class string, err error) EndpointResult {
		return EndpointResult{FenceClassName: class, State: power.StateUnknown, Err: err}
	}
	status := func(cond metav1.ConditionStatus, reason, msg string, ps fencingv1alpha1.PowerState, probed time.Time) fencingv1alpha1.FenceTargetStatus {
		t := metav1.NewTime(probed)
		return fencingv1alpha1.FenceTargetStatus{ObservedGeneration: 1, PowerState: ps, LastProbeTime: &t,
			Conditions: []metav1.Condition{{Type: fencingv1alpha1.FenceTargetReachable, Status: cond, Reason: reason, Message: msg, ObservedGeneration: 1}}}
	}
	reachableMsg := "1 of 1 endpoints answered a power-status query"
	authErr := fmt.Errorf("redfish status: %w", redfish.ErrAuth)
	tests := []struct {
		name       string
		old        fencingv1alpha1.FenceTargetStatus
		results    []EndpointResult
		wantCond   metav1.ConditionStatus
		wantReason string
		wantPower  fencingv1alpha1.PowerState
		wantWrite  bool
		wantTrans  Transition
	}{
		{"first probe, reachable", fencingv1alpha1.FenceTargetStatus{}, []EndpointResult{ok("rf", power.StateOn)},
			metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn, true, NoTransition},
		{"first probe, rejected", fencingv1alpha1.FenceTargetStatus{}, []EndpointResult{fail("rf", authErr)},
			metav1.ConditionFalse, devices.ReasonCredentialsRejected, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
		{"unchanged, probed recently: no write", status(metav1.ConditionTrue, devices.ReasonReachable, reachableMsg, fencingv1alpha1.PowerStateOn, now.Add(-10*time.Second)),
			[]EndpointResult{ok("rf", power.StateOn)}, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn, false, NoTransition},
		{"unchanged, probe time stale: write", status(metav1.ConditionTrue, devices.ReasonReachable, reachableMsg, fencingv1alpha1.PowerStateOn, now.Add(-interval)),
			[]EndpointResult{ok("rf", power.StateOn)}, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn, true, NoTransition},
		{"power changed: write", status(metav1.ConditionTrue, devices.ReasonReachable, reachableMsg, fencingv1alpha1.PowerStateOn, now.Add(-time.Second)),
			[]EndpointResult{ok("rf", power.StateOff)}, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOff, true, NoTransition},
		{"goes unreachable", status(metav1.ConditionTrue, devices.ReasonReachable, reachableMsg, fencingv1alpha1.PowerStateOn, now.Add(-time.Second)),
			[]EndpointResult{fail("rf", redfish.ErrUnreachable)}, metav1.ConditionFalse, devices.ReasonUnreachable, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
		{"still unreachable, same reason: no Event", status(metav1.ConditionFalse, devices.ReasonUnreachable, "endpoint rf: BMC unreachable", fencingv1alpha1.PowerStateUnknown, now.Add(-time.Second)),
			[]EndpointResult{fail("rf", redfish.ErrUnreachable)}, metav1.ConditionFalse, devices.ReasonUnreachable, fencingv1alpha1.PowerStateUnknown, false, NoTransition},
		{"new reason: Event", status(metav1.ConditionFalse, devices.ReasonUnreachable, "endpoint rf: BMC unreachable", fencingv1alpha1.PowerStateUnknown, now.Add(-time.Second)),
			[]EndpointResult{fail("rf", authErr)}, metav1.ConditionFalse, devices.ReasonCredentialsRejected, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
		{"recovers", status(metav1.ConditionFalse, devices.ReasonUnreachable, "x", fencingv1alpha1.PowerStateUnknown, now.Add(-time.Second)),
			[]EndpointResult{ok("rf", power.StateOn)}, metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateOn, true, BecameReachable},
		{"one of two fails: False, power Unknown", fencingv1alpha1.FenceTargetStatus{},
			[]EndpointResult{ok("rf", power.StateOn), fail("ip", fmt.Errorf("x: %w", devices.ErrInvalidConfiguration))},
			metav1.ConditionFalse, devices.ReasonInvalidConfiguration, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
		{"one reads Off, the other is silent: not Off", fencingv1alpha1.FenceTargetStatus{},
			[]EndpointResult{ok("pdu-a", power.StateOff), fail("pdu-b", redfish.ErrUnreachable)},
			metav1.ConditionFalse, devices.ReasonUnreachable, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
		{"endpoints disagree: Unknown", fencingv1alpha1.FenceTargetStatus{}, []EndpointResult{ok("rf", power.StateOn), ok("ip", power.StateOff)},
			metav1.ConditionTrue, devices.ReasonReachable, fencingv1alpha1.PowerStateUnknown, true, NoTransition},
		{"other error", fencingv1alpha1.FenceTargetStatus{}, []EndpointResult{fail("rf", errors.New("HTTP 500"))},
			metav1.ConditionFalse, devices.ReasonProbeFailed, fencingv1alpha1.PowerStateUnknown, true, BecameUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.old, 1, tc.results, now, interval)
			c := meta.FindStatusCondition(d.Status.Conditions, fencingv1alpha1.FenceTargetReachable)
			if c == nil || c.Status != tc.wantCond || c.Reason != tc.wantReason {
				t.Fatalf("condition %+v, want %s/%s", c, tc.wantCond, tc.wantReason)
			}
			if d.Status.PowerState != tc.wantPower || d.Write != tc.wantWrite || d.Transition != tc.wantTrans {
				t.Errorf("power %s write %v transition %v, want %s %v %v", d.Status.PowerState, d.Write, d.Transition, tc.wantPower, tc.wantWrite, tc.wantTrans)
			}
			if d.Write && !d.Status.LastProbeTime.Time.Equal(now) {
				t.Errorf("lastProbeTime %v, want %v", d.Status.LastProbeTime, now)
			}
		})
	}
}

func TestDecideTruncatesMessage(t *testing.T) {
	long := errors.New(string(make([]byte, 5000)))
	d := Decide(fencingv1alpha1.FenceTargetStatus{}, 1, []EndpointResult{{FenceClassName: "rf", Err: long}}, time.Now(), time.Minute)
	if len(d.Message) > maxMessage {
		t.Errorf("message of %d bytes, want at most %d", len(d.Message), maxMessage)
	}
}
