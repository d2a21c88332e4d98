package ipmi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
)

func TestPowerFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults Faults
		// then runs after the accepted power-down, with the node behind s.
		then func(t *testing.T, s *Simulator, node *Node)
	}{
		{"honest: off at once", Faults{}, func(t *testing.T, s *Simulator, node *Node) {
			if s.PoweredOn() || node.On() {
				t.Fatalf("BMC on=%v, %v; want off", s.PoweredOn(), node)
			}
		}},
		{"ignores power-down: stays on", Faults{IgnorePowerDown: true}, func(t *testing.T, s *Simulator, node *Node) {
			if !s.PoweredOn() || !node.On() || node.PowerOffs() != 0 {
				t.Fatalf("BMC on=%v, %v; want on, never cut", s.PoweredOn(), node)
			}
		}},
		{"delayed power-down: on, then off", Faults{PowerDownDelay: 200 * time.Millisecond}, func(t *testing.T, s *Simulator, node *Node) {
			if !s.PoweredOn() || !node.On() {
				t.Fatalf("off before the delay: BMC on=%v, %v", s.PoweredOn(), node)
			}
			eventually(t, "delayed power-down", 3*time.Second, func() bool { return !s.PoweredOn() && !node.On() })
		}},
		{"reads off while on: power-down still cuts the node", Faults{ReadsOff: true}, func(t *testing.T, s *Simulator, node *Node) {
			if s.PoweredOn() || node.On() || node.PowerOffs() != 1 {
				t.Fatalf("BMC on=%v, %v; want the node cut once", s.PoweredOn(), node)
			}
		}},
		{"delayed power-down voided by power up", Faults{PowerDownDelay: 150 * time.Millisecond}, func(t *testing.T, s *Simulator, node *Node) {
			if err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerUp); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil { // waits for a delayed power-down already running
				t.Fatal(err)
			}
			if node.PowerOffs() != 0 || !node.On() {
				t.Fatalf("a voided power-down cut the power: %v", node)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := NewNode(true)
			s := start(t, Config{Power: node})
			if err := s.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			if err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerDown); err != nil {
				t.Fatalf("power down not accepted: %v", err)
			}
			tc.then(t, s, node)
		})
	}
}

func TestCloseVoidsDelayedPowerDown(t *testing.T) {
	node := NewNode(true)
	s := start(t, Config{Power: node})
	if err := s.SetFaults(Faults{PowerDownDelay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerDown); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !node.On() {
		t.Fatal("a closed BMC cut the power")
	}
}

func TestNetworkAndAuthFaults(t *testing.T) {
	tests := []struct {
		name    string
		faults  Faults
		wantErr bool
		check   func(t *testing.T, s *Simulator, took time.Duration)
	}{
		{"honest", Faults{}, false, nil},
		{"latency", Faults{Latency: 40 * time.Millisecond}, false, func(t *testing.T, _ *Simulator, took time.Duration) {
			if took < 40*time.Millisecond {
				t.Fatalf("session set up in %v, under the latency", took)
			}
		}},
		{"rejects the credentials", Faults{RejectAuth: true}, true, nil},
		{"unreachable", Faults{Unreachable: true}, true, func(t *testing.T, s *Simulator, _ time.Duration) {
			if s.Dropped() == 0 {
				t.Fatal("no datagram counted as dropped")
			}
		}},
	}
	for _, iface := range []client.Interface{client.InterfaceLanplus, client.InterfaceLan} {
		for _, tc := range tests {
			t.Run(string(iface)+"/"+tc.name, func(t *testing.T) {
				s := start(t, Config{})
				if err := s.SetFaults(tc.faults); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				begin := time.Now()
				c, err := session(ctx, s, iface, password)
				took := time.Since(begin)
				if c != nil {
					_ = c.Close(ctx)
				}
				if (err != nil) != tc.wantErr {
					t.Fatalf("session: %v, want error %v", err, tc.wantErr)
				}
				if tc.check != nil {
					tc.check(t, s, took)
				}
				// Back to honest: the same credentials work again.
				if err := s.SetFaults(Faults{}); err != nil {
					t.Fatal(err)
				}
				c, err = session(ctx, s, iface, password)
				if err != nil {
					t.Fatalf("after clearing the faults: %v", err)
				}
				_ = c.Close(ctx)
			})
		}
	}
}

// TestRecord: the BMC keeps each command's name, user and action, and
// never the password, even when a client sends a wrong one.
func TestRecord(t *testing.T) {
	s := start(t, Config{})
	ctx := context.Background()
	if _, err := session(ctx, s, client.InterfaceLan, "wrong-"+password); err == nil {
		t.Fatal("a wrong password opened a session")
	}
	if err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerDown); err != nil {
		t.Fatal(err)
	}
	cmds := s.Commands()
	var names []string
	var control *Command
	for i, c := range cmds {
		names = append(names, c.Name)
		if c.Name == "Chassis Control" {
			control = &cmds[i]
		}
	}
	if control == nil || control.Action != "power down" || control.User != user || control.CompletionCode != 0 || control.At.IsZero() {
		t.Fatalf("Chassis Control record = %+v, want power down by %s, answered 0 (commands: %v)", control, user, names)
	}
	if dump := fmt.Sprintf("%+v", cmds); strings.Contains(dump, password) {
		t.Fatalf("the record holds the password: %s", dump)
	}
}

// TestReadsOffAndRepeatedPowerDown: with ReadsOff the BMC reads off while
// the node runs; a power down of a node that is off is accepted (00h) and
// changes nothing, as on real BMCs, so a fencer may always send it.
func TestReadsOffAndRepeatedPowerDown(t *testing.T) {
	node := NewNode(true)
	s := start(t, Config{Power: node})
	if err := s.SetFaults(Faults{ReadsOff: true}); err != nil {
		t.Fatal(err)
	}
	if on := chassisOn(t, s); on || !node.On() {
		t.Fatalf("ReadsOff: Get Chassis Status on=%v with the node %v; want it to read off while on", on, node)
	}
	if err := s.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerDown); err != nil {
			t.Fatalf("power down %d not accepted: %v", i+1, err)
		}
	}
	if chassisOn(t, s) || node.On() || node.PowerOffs() != 1 {
		t.Fatalf("after two power downs: BMC on=%v, %v; want off, cut once", s.PoweredOn(), node)
	}
}

// chassisOn reads Get Chassis Status's power bit.
func chassisOn(t *testing.T, s *Simulator) bool {
	t.Helper()
	ctx := context.Background()
	c, err := session(ctx, s, client.InterfaceLanplus, password)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	st, err := c.GetChassisStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.PowerIsOn
}
