package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/ipmi"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
)

// notVerified wraps err as power.PowerOff does when no attempt read Off.
func notVerified(err error) error {
	return fmt.Errorf("%w after 2 attempts (last read: Unknown): %w", power.ErrNotVerified, err)
}

func TestCause(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		last power.State
		want string
	}{
		{"Redfish 401", notVerified(fmt.Errorf("redfish off: connect: %w", redfish.ErrAuth)), power.StateUnknown, "credentials rejected"},
		{"IPMI RAKP mismatch", notVerified(fmt.Errorf("ipmi: %w", ipmi.ErrAuth)), "", "credentials rejected"},
		{"rejected credentials outrank a read that timed out", notVerified(errors.Join(fmt.Errorf("off: %w", redfish.ErrAuth), context.DeadlineExceeded)), "", "credentials rejected"},
		{"Secret without a password", fmt.Errorf("%w: no password", devices.ErrCredentials), "", "credentials missing"},
		{"no FenceTarget endpoint", fmt.Errorf("%w: no endpoint", devices.ErrInvalidConfiguration), "", "invalid fence configuration"},
		{"untrusted certificate", notVerified(fmt.Errorf("x509: %w", redfish.ErrTLS)), "", "certificate is not trusted"},
		{"unknown systemID", notVerified(redfish.ErrSystemNotFound), "", "system is not found"},
		{"connection refused", notVerified(fmt.Errorf("dial: %w", redfish.ErrUnreachable)), power.StateUnknown, "unreachable"},
		{"no answer in time", notVerified(context.DeadlineExceeded), "", "unreachable"},
		{"answered On, then silent", notVerified(context.DeadlineExceeded), power.StateOn, "still read back On"},
		{"accepted the off and stayed on", notVerified(errors.New("still On after 15s")), power.StateOn, "still read back On"},
		{"never Off, last read unknown", notVerified(errors.New("still Unknown after 15s")), power.StateUnknown, "never read back Off (last read: Unknown)"},
		{"no error, never Off", nil, "", "never read back Off (last read: Unknown)"},
		{"any other device error", errors.New("500 Internal Server Error"), power.StateUnknown, "fence device failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cause(tc.err, tc.last); !strings.Contains(got, tc.want) {
				t.Fatalf("Cause(%v, %q) = %q, want it to say %q", tc.err, tc.last, got, tc.want)
			}
		})
	}
}

func TestWithCause(t *testing.T) {
	for _, tc := range []struct{ cause, detail, want string }{
		{"credentials rejected", "redfish off: 401", "credentials rejected: redfish off: 401"},
		{"invalid fence configuration", "invalid fence configuration: no FenceTarget n1", "invalid fence configuration: no FenceTarget n1"},
		{"the fence device failed", "", "the fence device failed"},
	} {
		if got := withCause(tc.cause, tc.detail); got != tc.want {
			t.Errorf("withCause(%q, %q) = %q, want %q", tc.cause, tc.detail, got, tc.want)
		}
	}
}

// TestAttemptNamesRejectedCredentials: a BMC that refuses the credentials
// fails the attempt with a message that starts with that cause, which the
// controller quotes when the request fails.
func TestAttemptNamesRejectedCredentials(t *testing.T) {
	f := newFixture(t, levels("bmc"), fencingRequest(), node1())
	f.devices["bmc"].failOffs, f.devices["bmc"].offErr = 10, fmt.Errorf("redfish off of system 1: connect: %w", redfish.ErrAuth)
	f.devices["bmc"].stayOn = true
	r := f.sync(t)
	a := r.Status.Attempts[0]
	if a.Result != fencingv1alpha1.FenceAttemptFailed || !strings.HasPrefix(a.Message, "credentials rejected by the fence device: ") {
		t.Fatalf("attempt %+v; want Failed with a message that starts with the rejected credentials", a)
	}
}

func TestTimedOutMessage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		last      power.State
		wantStart string
	}{
		{"rejected credentials lead", errors.Join(notVerified(fmt.Errorf("off: %w", redfish.ErrAuth)), context.DeadlineExceeded), "", "credentials rejected by the fence device: the level's timeout ran out (last read: Unknown)"},
		{"a device still powering off: the deadline is the finding", errors.Join(errors.New("still Unknown after 5s"), context.DeadlineExceeded), power.StateUnknown, "the level's timeout ran out (last read: Unknown)"},
		{"a device that kept the power on", errors.Join(errors.New("still On after 5s"), context.DeadlineExceeded), power.StateOn, "the level's timeout ran out (last read: On)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timedOutMessage(tc.err, tc.last, tc.err); !strings.HasPrefix(got, tc.wantStart) {
				t.Fatalf("timedOutMessage = %q, want it to start with %q", got, tc.wantStart)
			}
		})
	}
}
