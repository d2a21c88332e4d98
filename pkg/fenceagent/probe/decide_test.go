package probe

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
	"fenceline.io/fenceline/pkg/names"
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
			d := Decide(tc.old, 1, "", tc.results, now, interval)
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
	d := Decide(fencingv1alpha1.FenceTargetStatus{}, 1, "", []EndpointResult{{FenceClassName: "rf", Err: long}}, time.Now(), time.Minute)
	if len(d.Message) > maxMessage {
		t.Errorf("message of %d bytes, want at most %d", len(d.Message), maxMessage)
	}
}

// TestDecideAnswersPowerCheck: an ask is answered with the state the probe
// read, a new ask (another token) is answered anew although nothing else
// changed, and no ask leaves the last answer as it was.
func TestDecideAnswersPowerCheck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	probed := metav1.NewTime(now.Add(-time.Second))
	reachable := []metav1.Condition{{Type: fencingv1alpha1.FenceTargetReachable, Status: metav1.ConditionTrue, Reason: devices.ReasonReachable,
		Message: "1 of 1 endpoints answered a power-status query", ObservedGeneration: 1}}
	answered := func(token string, ps fencingv1alpha1.PowerState) fencingv1alpha1.FenceTargetStatus {
		return fencingv1alpha1.FenceTargetStatus{ObservedGeneration: 1, Conditions: reachable, PowerState: ps, LastProbeTime: &probed,
			PowerCheck: &fencingv1alpha1.FencePowerCheck{Token: token, PowerState: ps}}
	}
	off := []EndpointResult{{FenceClassName: "rf", State: power.StateOff}}
	silent := []EndpointResult{{FenceClassName: "rf", State: power.StateUnknown, Err: redfish.ErrUnreachable}}
	tests := []struct {
		name      string
		old       fencingv1alpha1.FenceTargetStatus
		ask       string
		results   []EndpointResult
		want      *fencingv1alpha1.FencePowerCheck
		wantWrite bool
	}{
		{"first ask, reads Off", fencingv1alpha1.FenceTargetStatus{}, "t1", off, &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateOff}, true},
		{"first ask, device silent: Unknown", fencingv1alpha1.FenceTargetStatus{}, "t1", silent, &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateUnknown}, true},
		{"a new ask with nothing else changed is written", answered("t1", fencingv1alpha1.PowerStateOff), "t2", off, &fencingv1alpha1.FencePowerCheck{Token: "t2", PowerState: fencingv1alpha1.PowerStateOff}, true},
		{"same ask, same state, probed recently: no write", answered("t1", fencingv1alpha1.PowerStateOff), "t1", off, &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateOff}, false},
		{"same ask, the node is back on: the answer follows", answered("t1", fencingv1alpha1.PowerStateOff), "t1", []EndpointResult{{FenceClassName: "rf", State: power.StateOn}}, &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateOn}, true},
		{"no ask keeps the last answer", answered("t1", fencingv1alpha1.PowerStateOff), "", off, &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateOff}, false},
		{"no ask, never asked: none", fencingv1alpha1.FenceTargetStatus{}, "", off, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.old, 1, tc.ask, tc.results, now, time.Minute)
			if !reflect.DeepEqual(d.Status.PowerCheck, tc.want) || d.Write != tc.wantWrite {
				t.Fatalf("powerCheck %+v write %v, want %+v %v", d.Status.PowerCheck, d.Write, tc.want, tc.wantWrite)
			}
		})
	}
}

func TestUnanswered(t *testing.T) {
	target := func(ask string, answer *fencingv1alpha1.FencePowerCheck) *fencingv1alpha1.FenceTarget {
		ft := &fencingv1alpha1.FenceTarget{Status: fencingv1alpha1.FenceTargetStatus{PowerCheck: answer}}
		if ask != "" {
			ft.Annotations = map[string]string{names.PowerCheckAnnotation: ask}
		}
		return ft
	}
	offT1 := &fencingv1alpha1.FencePowerCheck{Token: "t1", PowerState: fencingv1alpha1.PowerStateOff}
	for _, tc := range []struct {
		name string
		ft   *fencingv1alpha1.FenceTarget
		want bool
	}{
		{"no ask", target("", offT1), false},
		{"asked, never answered", target("t1", nil), true},
		{"asked and answered", target("t1", offT1), false},
		{"asked anew", target("t2", offT1), true},
	} {
		if got := Unanswered(tc.ft); got != tc.want {
			t.Errorf("%s: Unanswered %v, want %v", tc.name, got, tc.want)
		}
	}
}
