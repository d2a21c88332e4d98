// Package ipmi is the IPMI fence method: a power.Device that reads the
// chassis power state with Get Chassis Status and cuts or restores it with
// Chassis Control power down (a hard off, not the ACPI soft shutdown) and
// power up, over IPMI v2.0 RMCP+ (lanplus) or IPMI v1.5 (lan), with
// github.com/bougou/go-ipmi.
//
// Like every method, it never decides that a node is off: Off only asks.
// power.PowerOff reads the state back and is the only judge.
//
// Each call opens its own session and closes it, so no session is held
// between the polls of a verify loop (a BMC has few session slots and
// reboots its own firmware now and then), and a call is bounded by the
// caller's context and Config.Timeout, whichever ends first.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"

	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// Device is one node's BMC, reached over IPMI.
type Device struct {
	cfg Config
}

var _ power.Device = (*Device)(nil)

// New returns the device of a valid config.
func New(cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Device{cfg: cfg.withDefaults()}, nil
}

// String describes the device without its credentials.
func (d *Device) String() string { return d.cfg.String() }

// GoString is String, so that %#v does not print the credentials either.
func (d *Device) GoString() string { return d.cfg.String() }

// Status reads the chassis power state. Anything but a readable answer is
// StateUnknown, with the error.
func (d *Device) Status(ctx context.Context) (power.State, error) {
	state := power.StateUnknown
	err := d.call(ctx, "get chassis status", func(ctx context.Context, c *client.Client) error {
		st, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		if st == nil {
			return errors.New("empty answer")
		}
		if st.PowerIsOn {
			state = power.StateOn
		} else {
			state = power.StateOff
		}
		return nil
	})
	if err != nil {
		return power.StateUnknown, err
	}
	return state, nil
}

// Off sends Chassis Control power down: the power is cut at once, without
// a graceful shutdown. nil means the BMC accepted it, not that the node is
// off.
func (d *Device) Off(ctx context.Context) error {
	return d.control(ctx, "power down", chassis.ChassisControlPowerDown)
}

// On sends Chassis Control power up.
func (d *Device) On(ctx context.Context) error {
	return d.control(ctx, "power up", chassis.ChassisControlPowerUp)
}

func (d *Device) control(ctx context.Context, name string, action chassis.ChassisControl) error {
	return d.call(ctx, "chassis control "+name, func(ctx context.Context, c *client.Client) error {
		_, err := c.ChassisControl(ctx, action)
		return err
	})
}

// call runs one command in a session of its own, bounded by ctx and
// Config.Timeout. The session runs in a goroutine so that call returns as
// soon as ctx ends even where go-ipmi does not watch ctx; that goroutine
// then ends on its own within the exchange timeout, after closing the
// session and the socket.
func (d *Device) call(ctx context.Context, op string, fn func(context.Context, *client.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.session(ctx, fn) }()
	var err error
	select {
	case err = <-done:
		// go-ipmi sets its read deadline to the context's, so its timeout
		// can fire just before the context's own: the cause is the same.
		if dl, _ := ctx.Deadline(); err != nil && !time.Now().Before(dl) {
			err = fmt.Errorf("no answer in time: %w: %w", context.DeadlineExceeded, err)
		}
	case <-ctx.Done():
		err = fmt.Errorf("no answer in time: %w", ctx.Err())
	}
	if err != nil {
		return d.wrap(op, err)
	}
	return nil
}

// session opens a session, runs fn and closes the session.
func (d *Device) session(ctx context.Context, fn func(context.Context, *client.Client) error) error {
	c, err := client.NewClient(d.cfg.Host, d.cfg.Port, d.cfg.Username, d.cfg.Password)
	if err != nil {
		return errors.New("creating the client: bad username") // go-ipmi's message names the user
	}
	exchange := d.exchangeTimeout()
	c.WithInterface(client.Interface(d.cfg.Interface)).
		WithTimeout(exchange).
		WithRetry(exchangeRetries).
		WithMaxPrivilegeLevel(d.cfg.privilegeLevel())
	if d.cfg.Interface == InterfaceLanplus {
		c.WithCipherSuiteID(d.cfg.suites()...)
	}
	if err := c.Connect(ctx); err != nil {
		// Release the socket at once: no session to close.
		expired, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Close(expired)
		return &phaseError{phase: phaseConnect, err: err}
	}
	defer func() {
		// Close the session even when ctx has ended: BMCs have few
		// session slots.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exchange)
		defer cancel()
		_ = c.Close(cctx)
	}()
	if err := fn(ctx, c); err != nil {
		return &phaseError{phase: phaseCommand, err: err}
	}
	return nil
}

// exchangeRetries is how many times one datagram is resent before an
// exchange fails, as ipmitool's default.
const exchangeRetries = 3

// exchangeTimeout is how long one datagram waits for its answer: a quarter
// of the call's timeout, so that the retries fit, and at most ipmitool's
// lan default of 2 s.
func (d *Device) exchangeTimeout() time.Duration {
	t := d.cfg.Timeout / (exchangeRetries + 1)
	return min(max(t, 50*time.Millisecond), 2*time.Second)
}
