package nodefencing

import (
	"fmt"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// maxFailureDetail bounds the attempt's message quoted in a Failed
// request's message, so that the whole fits the API's 1024 bytes with the
// cause first.
const maxFailureDetail = 600

// LastFailure says why the request's fence failed, from its latest ended
// attempt that did not succeed: its level, class, method, result and
// message, whose first words are the fence agent's cause ("credentials
// rejected by the fence device", "the power still read back On"). It is
// "no fence attempt ended" when none did (a policy with no class, or an
// agent that never ran), so that a Failed request never says less than
// what is known.
func LastFailure(attempts []fencingv1alpha1.FenceAttempt) string {
	for i := len(attempts) - 1; i >= 0; i-- {
		a := attempts[i]
		if a.EndTime == nil || a.Result == "" || a.Result == fencingv1alpha1.FenceAttemptSucceeded {
			continue
		}
		method := a.Method
		if method == "" {
			method = "no method"
		}
		msg := a.Message
		if msg == "" {
			msg = "no message"
		}
		if len(msg) > maxFailureDetail {
			msg = msg[:maxFailureDetail-3] + "..."
		}
		return fmt.Sprintf("level %d, FenceClass %s (%s): %s: %s", a.Level, a.FenceClass, method, a.Result, msg)
	}
	return "no fence attempt ended"
}
