package redfish

import (
	"testing"
	"time"
)

// stateHook reads the system's PowerState from inside the Off hook, as a
// fencer polling the BMC while the node is being powered off would.
type stateHook struct {
	s    *Server
	seen chan string
}

func (h *stateHook) On(string)     {}
func (h *stateHook) Off(id string) { h.seen <- h.s.PowerState(id) }

// TestOffReadAfterHook checks the order a fencer relies on: the system
// reads Off only once its Power hook has returned, so a read of Off means
// the node behind it is off; the reset answers only after that.
func TestOffReadAfterHook(t *testing.T) {
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		h := &stateHook{seen: make(chan string, 1)}
		s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Power: h}}})
		h.s = s
		s.SetOffDelay(delay)
		c := newClient(t, s)
		if st := reset(c, "1", "ForceOff"); st != 204 {
			t.Fatalf("delay %v: ForceOff status %d", delay, st)
		}
		select {
		case during := <-h.seen:
			if during != "PoweringOff" {
				t.Fatalf("delay %v: the hook saw PowerState %q, want PoweringOff", delay, during)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("delay %v: the hook was never called", delay)
		}
		if delay == 0 {
			if got := s.PowerState("1"); got != "Off" {
				t.Fatalf("PowerState %q once the reset answered, want Off", got)
			}
		}
		s.Close()
	}
}
