package world

import (
	"context"
	"fmt"
	"sync"
	"time"

	"fenceline.io/fenceline/pkg/fenceagent/ipmi"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
)

// bmcDeviceTimeout bounds each call of a Device built by BMC.Device.
const bmcDeviceTimeout = 5 * time.Second

// Device returns the product's fence device for the BMC, as a FenceTarget
// endpoint and the credentials Secret configure it: the Redfish Device of
// pkg/fenceagent/redfish (trusting the BMC's certificate) or the IPMI
// Device of pkg/fenceagent/ipmi (lanplus). With WithTimeline, what it sends
// and each new power state it reads back are recorded there.
func (b *BMC) Device() (power.Device, error) {
	var dev power.Device
	switch b.Kind {
	case BMCRedfish:
		d, err := redfish.New(redfish.Config{
			Address: b.Address, SystemID: b.SystemID, Username: b.Username, Password: b.Password,
			RootCAs: b.RootCAs, Timeout: bmcDeviceTimeout,
		})
		if err != nil {
			return nil, fmt.Errorf("the Redfish device of %s: %w", b.Node, err)
		}
		dev = d
	case BMCIPMI:
		d, err := ipmi.New(ipmi.Config{
			Host: b.Host, Port: b.Port, Username: b.Username, Password: b.Password, Timeout: bmcDeviceTimeout,
		})
		if err != nil {
			return nil, fmt.Errorf("the IPMI device of %s: %w", b.Node, err)
		}
		dev = d
	default:
		return nil, fmt.Errorf("no device for BMC kind %q", b.Kind)
	}
	return &recordingDevice{dev: dev, b: b}, nil
}

// recordingDevice passes every call to the real device and records the
// requests and the power states read back in the BMC's timeline.
type recordingDevice struct {
	dev power.Device
	b   *BMC

	mu   sync.Mutex
	last power.State // the last state recorded since the last request
}

// Status reads the power state; a state other than the last one read
// since the last request is recorded ("power read back Off").
func (d *recordingDevice) Status(ctx context.Context) (power.State, error) {
	s, err := d.dev.Status(ctx)
	if err != nil {
		return s, err // a pass-through: the device's own error
	}
	d.mu.Lock()
	changed := s != d.last
	d.last = s
	d.mu.Unlock()
	if changed {
		d.b.event("power read back %s", s)
	}
	return s, nil
}

// Off asks for a power-off and records whether the BMC accepted it.
func (d *recordingDevice) Off(ctx context.Context) error {
	return d.request(ctx, d.offAction(), d.dev.Off)
}

// On asks for a power-on and records whether the BMC accepted it.
func (d *recordingDevice) On(ctx context.Context) error {
	return d.request(ctx, d.onAction(), d.dev.On)
}

func (d *recordingDevice) request(ctx context.Context, action string, fn func(context.Context) error) error {
	d.mu.Lock()
	d.last = ""
	d.mu.Unlock()
	if err := fn(ctx); err != nil {
		d.b.event("%s failed: %v", action, err)
		return err
	}
	d.b.event("%s accepted", action)
	return nil
}

func (d *recordingDevice) offAction() string {
	if d.b.Kind == BMCRedfish {
		return "ForceOff"
	}
	return "Chassis Control power down"
}

func (d *recordingDevice) onAction() string {
	if d.b.Kind == BMCRedfish {
		return "On"
	}
	return "Chassis Control power up"
}
