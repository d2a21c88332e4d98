package redfish

import (
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

// TestSendReset is the table of sendReset: a power-off goes out whatever
// the system reads, except a button press that could turn an off system
// on; a power-on is skipped when the system reads On.
func TestSendReset(t *testing.T) {
	const (
		on, off       = schemas.OnPowerState, schemas.OffPowerState
		poweringOff   = schemas.PoweringOffPowerState
		poweringOn    = schemas.PoweringOnPowerState
		forceOff      = schemas.ForceOffResetType
		button        = schemas.PushPowerButtonResetType
		onReset       = schemas.OnResetType
		unknown       = schemas.PowerState("")
		vendorReading = schemas.PowerState("Paused")
	)
	for _, tc := range []struct {
		name    string
		rt      schemas.ResetType
		current schemas.PowerState
		want    schemas.PowerState
		send    bool
	}{
		{"ForceOff to a system that reads On", forceOff, on, off, true},
		{"ForceOff to a system that reads Off: a reading proves nothing", forceOff, off, off, true},
		{"ForceOff to a system powering off", forceOff, poweringOff, off, true},
		{"ForceOff to a system powering on", forceOff, poweringOn, off, true},
		{"ForceOff to an empty reading", forceOff, unknown, off, true},
		{"ForceOff to a vendor reading", forceOff, vendorReading, off, true},
		{"button on a system that reads On", button, on, off, true},
		{"button on a system that reads Off: a press could power it on", button, off, off, false},
		{"button on a system powering off: a press could power it on", button, poweringOff, off, false},
		{"button on an empty reading", button, unknown, off, true},
		{"On to a system that reads Off", onReset, off, on, true},
		{"On to a system that reads On", onReset, on, on, false},
		{"On to a system powering off", onReset, poweringOff, on, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send, why := sendReset(tc.rt, tc.current, tc.want)
			if send != tc.send {
				t.Fatalf("sendReset(%s, %q, %s) = %v (%s), want %v", tc.rt, tc.current, tc.want, send, why, tc.send)
			}
			if !send && why == "" {
				t.Errorf("a reset not sent says no why")
			}
		})
	}
}
