// Package power is the one verify loop every power fence method shares:
// ask the device to cut power, then read the power state back until it
// says Off. A method (Redfish, IPMI, a fence agent) only implements Device;
// it never decides that a node is off. An accepted request, an HTTP 204 or
// a zero exit code is not proof: Pacemaker's rule, and the one gap of the
// Kubernetes peers that trust an agent's exit code.
package power

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// State is a power state as read back from a fence device.
type State string

// The states a Device reports. Anything a device cannot map to On or Off
// (PoweringOff, a vendor string, an empty answer) is Unknown, which is
// never taken for Off.
const (
	StateOn      State = "On"
	StateOff     State = "Off"
	StateUnknown State = "Unknown"
)

// Device is one node's fence device: a BMC, a PDU outlet, a hypervisor.
type Device interface {
	// Status reads the power state back from the device.
	Status(ctx context.Context) (State, error)
	// Off asks the device to cut power at once, without a graceful
	// shutdown. nil means the device accepted the request, not that the
	// node is off.
	Off(ctx context.Context) error
	// On asks the device to power the node on.
	On(ctx context.Context) error
}

// Options bound one verified power-off.
type Options struct {
	// ActionTimeout bounds each Off request.
	ActionTimeout time.Duration
	// VerifyTimeout bounds the read-back after an accepted Off.
	VerifyTimeout time.Duration
	// PollInterval is the pause between two Status reads.
	PollInterval time.Duration
	// Retries is how many more times Off is sent when an attempt fails or
	// its read-back never shows Off.
	Retries int
}

// DefaultOptions are the defaults of the fence agents' power options:
// a request timeout of 10 s, 15 s to see the node off, a read every second.
var DefaultOptions = Options{ActionTimeout: 10 * time.Second, VerifyTimeout: 15 * time.Second, PollInterval: time.Second, Retries: 1}

// Validate reports options under which no power-off can be verified.
func (o Options) Validate() error {
	if o.ActionTimeout <= 0 || o.VerifyTimeout <= 0 || o.PollInterval <= 0 || o.Retries < 0 {
		return fmt.Errorf("power options need positive timeouts and poll interval and non-negative retries, got %+v", o)
	}
	return nil
}

// Result is what a verified power-off observed.
type Result struct {
	// Verified is the last state read back: StateOff only on success.
	Verified State
	// Attempts counts the Off requests sent.
	Attempts int
	// VerifiedAt is when Off was read back; zero on failure.
	VerifiedAt time.Time
}

// ErrNotVerified is wrapped by PowerOff's error when every attempt ended
// without the device reading back Off.
var ErrNotVerified = errors.New("power state never read back Off")

// Verified is the one rule of this package: only a read-back Off proves the
// node is off.
func Verified(s State) bool { return s == StateOff }

// PowerOff cuts a node's power and proves it: Off is sent, then Status
// polled until it reads Off or VerifyTimeout passes, and the whole is
// retried Retries times. Success is a nil error with Result.Verified ==
// StateOff; every failure wraps ErrNotVerified (or the context's error), so
// a caller can never mistake an accepted request for a fenced node.
//
// Off is sent even to a device that already reads Off: a read before the
// command proves nothing, since a BMC with a stale or broken power sensor
// reads Off while the node runs, and a fence that skipped the command on
// its word would leave a running node recorded as fenced. A power-off of a
// node that is off is harmless; the methods keep it so (Redfish ForceOff
// and IPMI power down are idempotent on real BMCs).
func PowerOff(ctx context.Context, d Device, o Options, now func() time.Time) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	res := Result{Verified: StateUnknown}
	var errs []error
	for attempt := 0; attempt <= o.Retries; attempt++ {
		res.Attempts++
		actx, cancel := context.WithTimeout(ctx, o.ActionTimeout)
		err := d.Off(actx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("attempt %d: power off: %w", res.Attempts, err))
		}
		// Read back even when the request failed: a BMC may cut power and
		// still time out or answer an error.
		s, verr := waitOff(ctx, d, o)
		res.Verified = s
		if Verified(s) {
			res.VerifiedAt = now()
			return res, nil
		}
		if verr != nil {
			errs = append(errs, fmt.Errorf("attempt %d: read back: %w", res.Attempts, verr))
		}
		if ctx.Err() != nil {
			return res, errors.Join(append(errs, ctx.Err())...)
		}
	}
	return res, fmt.Errorf("%w after %d attempts (last read: %s): %w", ErrNotVerified, res.Attempts, res.Verified, errors.Join(errs...))
}

// waitOff polls Status until Off or VerifyTimeout; it returns the last
// state read and the last read error.
func waitOff(ctx context.Context, d Device, o Options) (State, error) {
	vctx, cancel := context.WithTimeout(ctx, o.VerifyTimeout)
	defer cancel()
	last, lastErr := StateUnknown, error(nil)
	read := false
	tick := time.NewTicker(o.PollInterval)
	defer tick.Stop()
	for {
		s, err := status(vctx, d, o)
		switch {
		case err == nil:
			last, lastErr, read = s, nil, true
			if Verified(s) {
				return s, nil
			}
		case read && vctx.Err() != nil:
			// A read cut short by the verify deadline says nothing new: the
			// device answered before, and what it said is the finding.
		default:
			lastErr = err
		}
		select {
		case <-vctx.Done():
			if lastErr == nil && !Verified(last) {
				lastErr = fmt.Errorf("still %s after %v", last, o.VerifyTimeout)
			}
			return last, lastErr
		case <-tick.C:
		}
	}
}

func status(ctx context.Context, d Device, o Options) (State, error) {
	sctx, cancel := context.WithTimeout(ctx, o.ActionTimeout)
	defer cancel()
	return d.Status(sctx)
}
