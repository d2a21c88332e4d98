package ipmi

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bougou/go-ipmi/pkg/hal"
	"github.com/bougou/go-ipmi/pkg/types"
)

// rail is the BMC's view of the node's power: the state Get Chassis Status
// reads, the Power hook Chassis Control drives, and the power faults.
type rail struct {
	faults func() Faults

	// on is written under mu and read without it, so that a Power hook
	// may read the state (still the old one) without deadlocking.
	on atomic.Bool

	mu      sync.Mutex
	power   Power
	pending *time.Timer // a delayed power-down not yet applied
	gen     int         // bumped to void a pending power-down
	delayed sync.WaitGroup
	closed  bool
}

func (r *rail) state() bool { return r.on.Load() }

// set applies a Chassis Control power-down or power-up, with the faults.
func (r *rail) set(ctx context.Context, on bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.voidPendingLocked()
	if on {
		return r.applyLocked(ctx, true)
	}
	f := r.faults()
	switch {
	case f.IgnorePowerDown:
		return nil // accepted, and the node stays on
	case f.PowerDownDelay > 0:
		r.scheduleOffLocked(f.PowerDownDelay)
		return nil
	}
	return r.applyLocked(ctx, false)
}

// applyLocked calls the hook, then records the new state, so that the state
// never reads Off before the node is off.
func (r *rail) applyLocked(ctx context.Context, on bool) error {
	if r.on.Load() == on {
		return nil
	}
	var err error
	if r.power != nil {
		if on {
			err = r.power.PowerOn(ctx)
		} else {
			err = r.power.PowerOff(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("power hook (on=%v): %w", on, err)
	}
	r.on.Store(on)
	return nil
}

func (r *rail) scheduleOffLocked(d time.Duration) {
	if r.closed {
		return
	}
	gen := r.gen
	r.delayed.Add(1)
	r.pending = time.AfterFunc(d, func() {
		defer r.delayed.Done()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.gen != gen || r.closed {
			return
		}
		r.pending = nil
		ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
		defer cancel()
		_ = r.applyLocked(ctx, false) // a failing hook leaves the node on, as a stuck relay would
	})
}

func (r *rail) voidPendingLocked() {
	r.gen++
	if r.pending != nil && r.pending.Stop() {
		r.delayed.Done()
	}
	r.pending = nil
}

// close voids a pending power-down and waits for one already running.
func (r *rail) close() {
	r.mu.Lock()
	r.closed = true
	r.voidPendingLocked()
	r.mu.Unlock()
	r.delayed.Wait()
}

// hookTimeout bounds a delayed power-down's call of the Power hook.
const hookTimeout = 10 * time.Second

// simHAL is the BMC's hardware: a chassis whose power is the rail, and
// nothing else (no sensors, storage, NIC, GPIO, I2C or console).
type simHAL struct{ chassis *chassisHAL }

func (h simHAL) Chassis() hal.ChassisHAL { return h.chassis }
func (simHAL) Sensors() hal.SensorHAL    { return nil }
func (simHAL) Storage() hal.StorageHAL   { return nil }
func (simHAL) Network() hal.NetworkHAL   { return nil }
func (simHAL) GPIO() hal.GPIOHAL         { return nil }
func (simHAL) I2C() hal.I2CHAL           { return nil }
func (simHAL) Console() hal.ConsoleHAL   { return nil }
func (simHAL) Close() error              { return nil }

// chassisHAL maps the Chassis Control actions to the rail: power down and
// up as such; power cycle and hard reset as a reboot (off, then on with a
// new boot ID); soft shutdown as a power-down.
type chassisHAL struct{ rail *rail }

// PowerState is what Get Chassis Status reads: the rail's power, unless
// the BMC is set to read Off whatever it is.
func (c *chassisHAL) PowerState(context.Context) (bool, error) {
	if c.rail.faults().ReadsOff {
		return false, nil
	}
	return c.rail.state(), nil
}

func (c *chassisHAL) SetPower(ctx context.Context, on bool) error { return c.rail.set(ctx, on) }

func (c *chassisHAL) PowerCycle(ctx context.Context) error { return c.reboot(ctx) }

func (c *chassisHAL) ColdReset(ctx context.Context) error { return c.reboot(ctx) }

func (c *chassisHAL) WarmReset(ctx context.Context) error { return c.rail.set(ctx, false) }

func (c *chassisHAL) reboot(ctx context.Context) error {
	c.rail.mu.Lock()
	defer c.rail.mu.Unlock()
	c.rail.voidPendingLocked()
	if err := c.rail.applyLocked(ctx, false); err != nil {
		return err
	}
	return c.rail.applyLocked(ctx, true)
}

func (c *chassisHAL) Identify(context.Context, uint8) error { return nil }

func (c *chassisHAL) IntrusionState(context.Context) (bool, error) { return false, nil }

func (c *chassisHAL) SetBootFlags(context.Context, *types.BootOptionParam_BootFlags) error {
	return hal.ErrNotSupported
}

func (c *chassisHAL) GetBootFlags(context.Context) (*types.BootOptionParam_BootFlags, error) {
	return nil, hal.ErrNotSupported
}

func (c *chassisHAL) SetBootInfoAcknowledge(context.Context, *types.BootOptionParam_BootInfoAcknowledge) error {
	return hal.ErrNotSupported
}

func (c *chassisHAL) GetBootInfoAcknowledge(context.Context) (*types.BootOptionParam_BootInfoAcknowledge, error) {
	return nil, hal.ErrNotSupported
}
