package ipmi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/types"
)

const (
	user     = "sim-operator"
	password = "sim-Pw-93xk"
)

func start(t *testing.T, cfg Config) *Simulator {
	t.Helper()
	if cfg.Username == "" {
		cfg.Username, cfg.Password = user, password
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// session opens a go-ipmi session to s; the caller closes it.
func session(ctx context.Context, s *Simulator, iface client.Interface, pass string) (*client.Client, error) {
	c, err := client.NewClient(s.Host(), s.Port(), user, pass)
	if err != nil {
		return nil, err
	}
	c.WithInterface(iface).WithTimeout(200 * time.Millisecond).WithRetry(1)
	if err := c.Connect(ctx); err != nil {
		expired, cancel := context.WithCancel(ctx)
		cancel()
		_ = c.Close(expired)
		return nil, err
	}
	return c, nil
}

// control opens a session, sends one chassis control action and closes.
func control(t *testing.T, s *Simulator, iface client.Interface, action chassis.ChassisControl) error {
	t.Helper()
	ctx := context.Background()
	c, err := session(ctx, s, iface, password)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	_, err = c.ChassisControl(ctx, action)
	return err
}

// eventually waits for cond until a deadline.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStartRefuses(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no credentials", Config{}, "required"},
		{"not loopback", Config{Username: user, Password: password, Addr: "0.0.0.0:0"}, "not a loopback"},
		{"password too long", Config{Username: user, Password: strings.Repeat("p", 21)}, "over"},
		{"cipher suite the server lacks", Config{Username: user, Password: password, CipherSuites: []types.CipherSuiteID{types.CipherSuiteID5}}, "not implemented"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("Start() accepted the config")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), password) {
				t.Fatalf("Start() = %v, want %q and no password", err, tc.want)
			}
		})
	}
}

// TestPowerHook: the hook runs before the BMC answers and before the state
// reads Off; a failing hook leaves the node on and the command failed; up
// boots the node again.
func TestPowerHook(t *testing.T) {
	for _, iface := range []client.Interface{client.InterfaceLanplus, client.InterfaceLan} {
		t.Run(string(iface), func(t *testing.T) {
			node := NewNode(true)
			var sim atomic.Pointer[Simulator]
			var mu sync.Mutex
			var onDuringHook []bool
			hook := PowerFuncs{
				Off: func(ctx context.Context) error {
					mu.Lock()
					onDuringHook = append(onDuringHook, sim.Load().PoweredOn())
					mu.Unlock()
					return node.PowerOff(ctx)
				},
				On: node.PowerOn,
			}
			s := start(t, Config{Power: hook})
			sim.Store(s)
			boot := node.BootID()
			if err := control(t, s, iface, chassis.ChassisControlPowerDown); err != nil {
				t.Fatal(err)
			}
			if s.PoweredOn() || node.On() {
				t.Fatalf("after power down: BMC on=%v, %v", s.PoweredOn(), node)
			}
			mu.Lock()
			if fmt.Sprint(onDuringHook) != "[true]" {
				t.Fatalf("state during the hook = %v, want [true]: Off must not be readable before the node is off", onDuringHook)
			}
			mu.Unlock()
			if err := control(t, s, iface, chassis.ChassisControlPowerUp); err != nil {
				t.Fatal(err)
			}
			if !s.PoweredOn() || !node.On() || node.BootID() == boot {
				t.Fatalf("after power up: BMC on=%v, %v, new boot ID %v", s.PoweredOn(), node, node.BootID() != boot)
			}
		})
	}
}

func TestFailingHookKeepsPower(t *testing.T) {
	s := start(t, Config{Power: PowerFuncs{Off: func(context.Context) error { return errors.New("relay stuck") }}})
	err := control(t, s, client.InterfaceLanplus, chassis.ChassisControlPowerDown)
	if err == nil {
		t.Fatal("power down succeeded though the hook failed")
	}
	if !s.PoweredOn() {
		t.Fatal("the BMC reads Off though the hook failed")
	}
}

// TestSetPoweredOn: a harness that powered the node by other means tells
// the BMC, which then reads that state without calling the hook.
func TestSetPoweredOn(t *testing.T) {
	node := NewNode(true)
	s := start(t, Config{Power: node})
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		s.SetPoweredOn(on)
		c, err := session(ctx, s, client.InterfaceLanplus, password)
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.GetChassisStatus(ctx)
		_ = c.Close(ctx)
		if err != nil || st.PowerIsOn != on {
			t.Fatalf("after SetPoweredOn(%v): Get Chassis Status = %+v, %v", on, st, err)
		}
	}
	if node.PowerOffs() != 0 || node.Boots() != 1 {
		t.Fatalf("SetPoweredOn called the hook: %v", node)
	}
}
