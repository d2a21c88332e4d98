package devices

import (
	"time"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// The CRD's defaults of a FenceClass's timeouts and retries, for a class
// that was written before a default existed or read from a fake client.
const (
	DefaultVerifyTimeout = 15 * time.Second
	DefaultPollInterval  = time.Second
	DefaultRetries       = 2
)

// PowerOptions are the options of a verified power-off with class: its
// action and verify timeouts, poll interval and retries.
func PowerOptions(class *fencingv1alpha1.FenceClass) power.Options {
	o := power.Options{ActionTimeout: DefaultActionTimeout, VerifyTimeout: DefaultVerifyTimeout, PollInterval: DefaultPollInterval, Retries: DefaultRetries}
	t := class.Spec.Timeouts
	if t.Action != nil && t.Action.Duration > 0 {
		o.ActionTimeout = t.Action.Duration
	}
	if t.Verify != nil && t.Verify.Duration > 0 {
		o.VerifyTimeout = t.Verify.Duration
	}
	if t.PollInterval != nil && t.PollInterval.Duration > 0 {
		o.PollInterval = t.PollInterval.Duration
	}
	if class.Spec.Retries != nil && *class.Spec.Retries >= 0 {
		o.Retries = int(*class.Spec.Retries)
	}
	return o
}
