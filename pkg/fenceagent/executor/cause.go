package executor

import (
	"errors"
	"fmt"
	"strings"

	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// Cause names, in a few words an operator acts on, why an attempt did not
// read the power back Off: the device refused the credentials, could not
// be reached, or answered and kept the power on. It leads the attempt's
// message, so that the Failed request that quotes the attempt names the
// real cause before any detail. err is the attempt's error (nil when the
// power-off ended without one), last the state last read back.
func Cause(err error, last power.State) string {
	switch devices.Reason(err) {
	case devices.ReasonCredentialsRejected:
		return "credentials rejected by the fence device"
	case devices.ReasonCredentialsMissing:
		return "fence credentials missing"
	case devices.ReasonTLSNotTrusted:
		return "the fence device's certificate is not trusted"
	case devices.ReasonSystemNotFound:
		return "the system is not found on the fence device"
	case devices.ReasonInvalidConfiguration:
		return "invalid fence configuration"
	case devices.ReasonUnreachable:
		if last == power.StateOn {
			// The device answered On before it stopped answering.
			return "the power still read back On"
		}
		return "the fence device is unreachable"
	}
	switch {
	case last == power.StateOn:
		return "the power still read back On"
	case errors.Is(err, power.ErrNotVerified) || err == nil:
		return fmt.Sprintf("the power never read back Off (last read: %s)", orUnknown(last))
	}
	return "the fence device failed"
}

func orUnknown(s power.State) power.State {
	if s == "" {
		return power.StateUnknown
	}
	return s
}

// withCause is an attempt's message: the cause, then the detail, which is
// not repeated when it already starts with the cause.
func withCause(cause, detail string) string {
	if detail == "" || strings.HasPrefix(detail, cause) {
		return cause + strings.TrimPrefix(detail, cause)
	}
	return cause + ": " + detail
}

// timedOutMessage is the message of an attempt the level's timeout cut
// short. It leads with the cause when the device gave a definite one
// (credentials, certificate, system, configuration): the deadline is then
// only how long it took to give up. Otherwise the deadline is the finding
// (a device still powering off, or silent) and the cause is not guessed.
func timedOutMessage(err error, last power.State, scrubbed error) string {
	msg := fmt.Sprintf("the level's timeout ran out (last read: %s): %v", orUnknown(last), scrubbed)
	switch devices.Reason(err) {
	case devices.ReasonCredentialsRejected, devices.ReasonCredentialsMissing, devices.ReasonTLSNotTrusted,
		devices.ReasonSystemNotFound, devices.ReasonInvalidConfiguration:
		return Cause(err, last) + ": " + msg
	}
	return msg
}
