package ipmi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/bmc"

	"fenceline.io/fenceline/pkg/fenceagent/power"
	bmcsim "fenceline.io/fenceline/test/bmc/ipmi"
)

// interfaces are the ways the method reaches the simulator: lanplus with
// the default suite choice (17, then 3), each suite pinned, and lan.
var interfaces = []struct {
	name  string
	iface Interface
	suite int
}{
	{"lanplus", InterfaceLanplus, 0},
	{"lanplus suite 3", InterfaceLanplus, 3},
	{"lanplus suite 17", InterfaceLanplus, 17},
	{"lan", InterfaceLan, 0},
}

// bench is one simulated node behind one simulated BMC, and the method
// pointed at it.
type bench struct {
	node *bmcsim.Node
	sim  *bmcsim.Simulator
	dev  *Device
}

func newBench(t *testing.T, iface Interface, suite int, timeout time.Duration) *bench {
	t.Helper()
	node := bmcsim.NewNode(true)
	sim, err := bmcsim.Start(bmcsim.Config{Username: testUser, Password: testPassword, Power: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	dev, err := New(Config{Host: sim.Host(), Port: sim.Port(), Username: testUser, Password: testPassword, Interface: iface, CipherSuite: suite, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return &bench{node: node, sim: sim, dev: dev}
}

// actions lists the chassis control actions the BMC received.
func (b *bench) actions() []string {
	var out []string
	for _, c := range b.sim.Commands() {
		if c.Action != "" {
			out = append(out, c.Action)
		}
	}
	return out
}

func TestPowerOffThroughSimulator(t *testing.T) {
	quick := power.Options{ActionTimeout: time.Second, VerifyTimeout: 400 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retries: 1}
	patient := quick
	patient.VerifyTimeout = 2 * time.Second
	tests := []struct {
		name       string
		faults     bmcsim.Faults
		opts       power.Options
		wantOff    bool
		wantAuth   bool
		wantOffs   int // power-downs the BMC received
		wantNodeOn bool
	}{
		// Cases that must verify Off get the patient window: on a loaded
		// machine a quick one can expire and resend the power-down.
		{"honest BMC: verified off", bmcsim.Faults{}, patient, true, false, 1, false},
		{"slow BMC within the timeouts: verified off", bmcsim.Faults{Latency: 30 * time.Millisecond}, patient, true, false, 1, false},
		{"accepts power-down, stays on: never verified", bmcsim.Faults{IgnorePowerDown: true}, quick, false, false, 2, true},
		{"powers off later, within the verify timeout: verified off", bmcsim.Faults{PowerDownDelay: 300 * time.Millisecond}, patient, true, false, 1, false},
		{"powers off after the verify timeout: not verified", bmcsim.Faults{PowerDownDelay: 5 * time.Second}, quick, false, false, 2, true},
		{"refuses the credentials: ErrAuth, not verified", bmcsim.Faults{RejectAuth: true}, quick, false, true, 0, true},
		{"reads off while on: power down still sent, node cut", bmcsim.Faults{ReadsOff: true}, patient, true, false, 1, false},
	}
	for _, in := range interfaces {
		for _, tc := range tests {
			t.Run(in.name+"/"+tc.name, func(t *testing.T) {
				b := newBench(t, in.iface, in.suite, time.Second)
				if err := b.sim.SetFaults(tc.faults); err != nil {
					t.Fatal(err)
				}
				res, err := power.PowerOff(context.Background(), b.dev, tc.opts, time.Now)
				checkNoCredentials(t, err)
				if tc.wantOff {
					if err != nil || res.Verified != power.StateOff || res.VerifiedAt.IsZero() {
						t.Fatalf("PowerOff() = %+v, %v; want verified Off", res, err)
					}
				} else {
					if err == nil || !errors.Is(err, power.ErrNotVerified) || res.Verified == power.StateOff {
						t.Fatalf("PowerOff() = %+v, %v; want ErrNotVerified and never Off", res, err)
					}
				}
				if got := errors.Is(err, ErrAuth); got != tc.wantAuth {
					t.Fatalf("errors.Is(%v, ErrAuth) = %v, want %v", err, got, tc.wantAuth)
				}
				if got := b.node.On(); got != tc.wantNodeOn {
					t.Fatalf("node on = %v, want %v (%v)", got, tc.wantNodeOn, b.node)
				}
				acts := b.actions()
				if len(acts) != tc.wantOffs {
					t.Fatalf("BMC received %v, want %d power down(s)", acts, tc.wantOffs)
				}
				for _, a := range acts {
					if a != "power down" {
						t.Fatalf("BMC received %q: the method sends only power down", a)
					}
				}
			})
		}
	}
}

// TestUnreachable: a BMC that does not answer, or no longer listens, fails
// within the bounds of the options, never reads Off, and leaves no
// goroutine behind.
func TestUnreachable(t *testing.T) {
	opts := power.Options{ActionTimeout: 300 * time.Millisecond, VerifyTimeout: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond, Retries: 1}
	// Per attempt an Off and the read-back, and a second of slack.
	bound := time.Duration(opts.Retries+1)*(opts.ActionTimeout+opts.VerifyTimeout) + time.Second
	tests := []struct {
		name   string
		break_ func(*bmcsim.Simulator) error
	}{
		{"drops every datagram", func(s *bmcsim.Simulator) error { return s.SetFaults(bmcsim.Faults{Unreachable: true}) }},
		{"stopped listening", func(s *bmcsim.Simulator) error { return s.Close() }},
	}
	for _, in := range interfaces {
		for _, tc := range tests {
			t.Run(in.name+"/"+tc.name, func(t *testing.T) {
				before := runtime.NumGoroutine()
				b := newBench(t, in.iface, in.suite, 5*time.Second)
				if err := tc.break_(b.sim); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				res, err := power.PowerOff(context.Background(), b.dev, opts, time.Now)
				elapsed := time.Since(start)
				checkNoCredentials(t, err)
				if err == nil || !errors.Is(err, power.ErrNotVerified) || res.Verified == power.StateOff {
					t.Fatalf("PowerOff() = %+v, %v; want ErrNotVerified and never Off", res, err)
				}
				if errors.Is(err, ErrAuth) {
					t.Fatalf("an unreachable BMC is not an auth failure: %v", err)
				}
				if elapsed > bound {
					t.Fatalf("PowerOff took %v, over the options' bound %v", elapsed, bound)
				}
				if !b.node.On() {
					t.Fatal("the node lost power though no BMC answered")
				}
				if err := b.sim.Close(); err != nil {
					t.Fatal(err)
				}
				waitGoroutines(t, before)
			})
		}
	}
}

// TestCallHonoursContext: a call returns when its context ends, whatever
// the BMC does, and its session goroutine ends afterwards.
func TestCallHonoursContext(t *testing.T) {
	tests := []struct {
		name   string
		faults bmcsim.Faults
		call   func(context.Context, *Device) error
	}{
		{"status, silent BMC", bmcsim.Faults{Unreachable: true}, func(ctx context.Context, d *Device) error { _, err := d.Status(ctx); return err }},
		{"off, slow BMC", bmcsim.Faults{Latency: 2 * time.Second}, func(ctx context.Context, d *Device) error { return d.Off(ctx) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			b := newBench(t, InterfaceLanplus, 0, 10*time.Second)
			if err := b.sim.SetFaults(tc.faults); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := tc.call(ctx, b.dev)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call = %v, want the context's deadline", err)
			}
			if elapsed := time.Since(start); elapsed > 650*time.Millisecond {
				t.Fatalf("call returned %v after its context's 150ms deadline", elapsed)
			}
			if err := b.sim.Close(); err != nil {
				t.Fatal(err)
			}
			waitGoroutines(t, before)
		})
	}
}

func TestOnBootsTheNode(t *testing.T) {
	for _, in := range interfaces {
		t.Run(in.name, func(t *testing.T) {
			b := newBench(t, in.iface, in.suite, time.Second)
			ctx := context.Background()
			boot := b.node.BootID()
			if st, err := b.dev.Status(ctx); err != nil || st != power.StateOn {
				t.Fatalf("Status() = %v, %v; want On", st, err)
			}
			if err := b.dev.Off(ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := b.dev.Status(ctx); err != nil || st != power.StateOff {
				t.Fatalf("Status() after Off = %v, %v; want Off", st, err)
			}
			if err := b.dev.On(ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := b.dev.Status(ctx); err != nil || st != power.StateOn {
				t.Fatalf("Status() after On = %v, %v; want On", st, err)
			}
			if !b.node.On() || b.node.BootID() == boot || b.node.Boots() != 2 {
				t.Fatalf("after Off and On: %v, boot ID changed: %v; want a second boot", b.node, b.node.BootID() != boot)
			}
		})
	}
}

// TestPrivilegeTooLow: a user the BMC lets only read cannot fence, and the
// error says it is an auth matter.
func TestPrivilegeTooLow(t *testing.T) {
	for _, in := range interfaces {
		t.Run(in.name, func(t *testing.T) {
			node := bmcsim.NewNode(true)
			sim, err := bmcsim.Start(bmcsim.Config{Username: testUser, Password: testPassword, Power: node, Privilege: bmc.PrivilegeLevelUser})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sim.Close() }()
			dev, err := New(Config{Host: sim.Host(), Port: sim.Port(), Username: testUser, Password: testPassword, Interface: in.iface, CipherSuite: in.suite, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			err = dev.Off(context.Background())
			checkNoCredentials(t, err)
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("Off() = %v, want ErrAuth", err)
			}
			if !node.On() {
				t.Fatal("a user without the privilege powered the node off")
			}
		})
	}
}

// checkNoCredentials fails when an error shows the user name or password.
func checkNoCredentials(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
		if strings.Contains(s, testPassword) || strings.Contains(s, testUser) {
			t.Fatalf("error shows a credential: %s", s)
		}
	}
}

// waitGoroutines waits until no more goroutines run than before, or fails.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, %d before the test:\n%s", runtime.NumGoroutine(), before, buf[:n])
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}
