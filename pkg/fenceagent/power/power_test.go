package power

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeDevice is a BMC whose behaviour each case sets.
type fakeDevice struct {
	mu sync.Mutex
	// state is what Status reports.
	state State
	// offAfter is how many Status reads after an accepted Off the state
	// turns Off; -1: never (a BMC that accepts ForceOff and stays on).
	offAfter int
	// offErr is what Off answers; the power still goes off unless
	// offAfter is -1 (a BMC that cuts power and then times out).
	offErr error
	// statusErr makes every Status fail (unreachable BMC).
	statusErr error
	// transient is reported while the power goes off.
	transient State
	// staleOff is how many reads report Off whatever the power is: a BMC
	// whose power sensor is stale or broken.
	staleOff int

	offCalls, reads, pending int
}

func (d *fakeDevice) Status(context.Context) (State, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.statusErr != nil {
		return "", d.statusErr
	}
	d.reads++
	if d.pending > 0 {
		d.pending--
		if d.pending == 0 {
			d.state = StateOff
		} else if d.transient != "" {
			return d.transient, nil
		}
	}
	if d.staleOff > 0 {
		d.staleOff--
		return StateOff, nil
	}
	return d.state, nil
}

func (d *fakeDevice) Off(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.offCalls++
	if d.offAfter >= 0 && d.pending == 0 && d.state != StateOff {
		d.pending = d.offAfter + 1
	}
	return d.offErr
}

func (d *fakeDevice) On(context.Context) error { return nil }

var fast = Options{ActionTimeout: 50 * time.Millisecond, VerifyTimeout: 40 * time.Millisecond, PollInterval: time.Millisecond, Retries: 1}

func TestPowerOff(t *testing.T) {
	unreachable := errors.New("connection refused")
	tests := []struct {
		name         string
		dev          *fakeDevice
		wantOK       bool
		wantAttempts int
	}{
		{"honest BMC: off after a few reads", &fakeDevice{state: StateOn, offAfter: 3}, true, 1},
		{"already reads Off: Off is still sent", &fakeDevice{state: StateOff}, true, 1},
		{"reads Off while on: Off is sent, not skipped", &fakeDevice{state: StateOn, offAfter: 0, staleOff: 1 << 10}, true, 1},
		{"accepts ForceOff but stays on: never verified, retried", &fakeDevice{state: StateOn, offAfter: -1}, false, 2},
		{"answers an error but cuts power: verified by the read-back", &fakeDevice{state: StateOn, offAfter: 1, offErr: errors.New("504")}, true, 1},
		{"unreachable: not verified", &fakeDevice{state: StateOn, offAfter: 0, statusErr: unreachable, offErr: unreachable}, false, 2},
		{"transitional state is not off", &fakeDevice{state: StateOn, offAfter: -1, transient: "PoweringOff"}, false, 2},
		{"unknown answer is not off", &fakeDevice{state: StateUnknown, offAfter: -1}, false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := fast
			if tc.wantOK {
				// The loop ends at the first Off: a long window costs a
				// passing case nothing and keeps a slow machine from
				// turning it into a retry.
				o.VerifyTimeout = 10 * time.Second
			}
			res, err := PowerOff(context.Background(), tc.dev, o, time.Now)
			if tc.wantOK {
				if err != nil || res.Verified != StateOff || res.VerifiedAt.IsZero() {
					t.Fatalf("PowerOff = %+v, %v; want verified Off", res, err)
				}
			} else {
				if err == nil || !errors.Is(err, ErrNotVerified) || Verified(res.Verified) {
					t.Fatalf("PowerOff = %+v, %v; want an error wrapping ErrNotVerified and no Off", res, err)
				}
			}
			if res.Attempts != tc.wantAttempts || tc.dev.offCalls != tc.wantAttempts {
				t.Errorf("attempts = %d, Off calls = %d, want %d", res.Attempts, tc.dev.offCalls, tc.wantAttempts)
			}
			if tc.wantOK && tc.dev.state != StateOff {
				t.Errorf("verified Off, but the node's power is %s", tc.dev.state)
			}
		})
	}
}

// slowStaysOn answers On at once the first time, then only after the verify
// deadline: the last read of each attempt is cut short.
type slowStaysOn struct {
	fakeDevice
	delay time.Duration
}

func (d *slowStaysOn) Status(ctx context.Context) (State, error) {
	d.mu.Lock()
	d.reads++
	first := d.reads == 1
	d.mu.Unlock()
	if first {
		return StateOn, nil
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(d.delay):
		return StateOn, nil
	}
}

// TestPowerOffReportsTheLastAnswer: a BMC that keeps answering On is
// reported as still On, not as unreachable, when the verify deadline cuts
// a read short.
func TestPowerOffReportsTheLastAnswer(t *testing.T) {
	d := &slowStaysOn{fakeDevice: fakeDevice{state: StateOn, offAfter: -1}, delay: 15 * time.Millisecond}
	o := Options{ActionTimeout: time.Second, VerifyTimeout: 40 * time.Millisecond, PollInterval: time.Millisecond}
	res, err := PowerOff(context.Background(), d, o, time.Now)
	if !errors.Is(err, ErrNotVerified) || res.Verified != StateOn {
		t.Fatalf("PowerOff = %+v, %v; want not verified, last read On", res, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q blames the deadline; the BMC answered On", err)
	}
}

func TestPowerOffStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := PowerOff(ctx, &fakeDevice{state: StateOn, offAfter: -1}, Options{ActionTimeout: time.Second, VerifyTimeout: time.Hour, PollInterval: time.Second, Retries: 5}, time.Now)
	if !errors.Is(err, context.Canceled) || Verified(res.Verified) || res.Attempts != 1 {
		t.Fatalf("PowerOff on a cancelled context = %+v, %v; want one attempt and context.Canceled", res, err)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions.Validate(); err != nil {
		t.Errorf("DefaultOptions: %v", err)
	}
	for _, o := range []Options{{}, {ActionTimeout: time.Second, VerifyTimeout: time.Second}, {ActionTimeout: time.Second, VerifyTimeout: time.Second, PollInterval: time.Second, Retries: -1}} {
		if o.Validate() == nil {
			t.Errorf("%+v accepted", o)
		}
		if _, err := PowerOff(context.Background(), &fakeDevice{state: StateOn}, o, time.Now); err == nil {
			t.Errorf("PowerOff with %+v did not fail", o)
		}
	}
}

func TestVerified(t *testing.T) {
	for s, want := range map[State]bool{StateOff: true, StateOn: false, StateUnknown: false, "PoweringOff": false, "": false, "off": false} {
		if Verified(s) != want {
			t.Errorf("Verified(%q) = %v, want %v", s, !want, want)
		}
	}
}
