package redfish

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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

// stuckNode is a node that will not stop: its power-off fails.
type stuckNode struct{ tries chan struct{} }

func (n *stuckNode) On(string)  {}
func (n *stuckNode) Off(string) { panic("TryOff must be used when implemented") }
func (n *stuckNode) TryOff(string) error {
	n.tries <- struct{}{}
	return errors.New("the node did not stop")
}

// TestFailedPowerOffNeverReadsOff: when the node behind the BMC does not
// stop, the reset is still accepted (as a lying BMC would) but the system
// goes back to On; it never reads Off.
func TestFailedPowerOffNeverReadsOff(t *testing.T) {
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		n := &stuckNode{tries: make(chan struct{}, 1)}
		s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Power: n}}})
		s.SetOffDelay(delay)
		c := newClient(t, s)
		if st := reset(c, "1", "ForceOff"); st != 204 {
			t.Fatalf("delay %v: ForceOff status %d", delay, st)
		}
		select {
		case <-n.tries:
		case <-time.After(10 * time.Second):
			t.Fatalf("delay %v: the hook was never called", delay)
		}
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			switch got := s.PowerState("1"); got {
			case "Off":
				return false, fmt.Errorf("PowerState Off although the node did not stop")
			default:
				return got == "On", nil
			}
		})
		if err != nil {
			t.Fatalf("delay %v: %v (PowerState %q, want back to On)", delay, err, s.PowerState("1"))
		}
		s.Close()
	}
}
