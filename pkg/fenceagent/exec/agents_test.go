package exec_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/pkg/fenceagent/exec"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/test/bmc/ipmi"
	"fenceline.io/fenceline/test/bmc/redfish"
	"fenceline.io/fenceline/test/fenceagents"
)

const (
	bmcUser     = "fence-admin"
	bmcPassword = "Agent-Pw-7qz"
)

// agentCase is one BMC behaviour and what a verified power-off through the
// real agent must conclude.
type agentCase struct {
	name       string
	password   string             // the password the device is given
	fault      func(t *testing.T) // switches the simulator's fault on
	wantOff    bool               // verified Off
	wantAuth   bool               // the error wraps exec.ErrAuth
	wantInErr  string             // a substring of the error
	within     time.Duration      // PowerOff returns within this
	simOnAfter bool               // the simulated node is still on afterwards
	check      func(t *testing.T) // further checks on the simulator
}

// opts bound one verified power-off in these tests: the agents' own
// timeouts are shortened through their args, so that a failure ends on
// the agent's error. The bounds are deadlines for a loaded machine, not
// goals: one read-back starts a Python agent and ipmitool, which took
// 2.3 s on a CI machine running the control-plane suites beside it.
var opts = power.Options{ActionTimeout: 20 * time.Second, VerifyTimeout: 10 * time.Second, PollInterval: 200 * time.Millisecond, Retries: 0}

func checkPowerOff(t *testing.T, tc agentCase, d *exec.Device, simOn func() bool) {
	t.Helper()
	ctx, logged := logContext(t)
	start := time.Now()
	res, err := power.PowerOff(ctx, d, opts, time.Now)
	took := time.Since(start)
	t.Logf("PowerOff: %+v, %v, took %v", res, err, took)
	if tc.wantOff {
		if err != nil || res.Verified != power.StateOff {
			t.Fatalf("PowerOff = %+v, %v; want verified Off", res, err)
		}
	} else {
		if !errors.Is(err, power.ErrNotVerified) || res.Verified == power.StateOff {
			t.Fatalf("PowerOff = %+v, %v; want ErrNotVerified", res, err)
		}
		if errors.Is(err, exec.ErrAuth) != tc.wantAuth {
			t.Fatalf("PowerOff error %v: wraps ErrAuth %v, want %v", err, errors.Is(err, exec.ErrAuth), tc.wantAuth)
		}
		if !strings.Contains(err.Error(), tc.wantInErr) {
			t.Fatalf("PowerOff error %q does not say %q", err, tc.wantInErr)
		}
		assertNoSecret(t, "error", err.Error(), bmcPassword)
	}
	if log := logged(); !strings.Contains(log, "Fence agent run") {
		t.Fatalf("no agent run logged at V(4):\n%s", log)
	} else {
		assertNoSecret(t, "log", log, bmcPassword)
		assertNoSecret(t, "log", log, tc.password)
	}
	if tc.within > 0 && took > tc.within {
		t.Fatalf("PowerOff took %v, want within %v", took, tc.within)
	}
	if simOn() != tc.simOnAfter {
		t.Fatalf("after PowerOff the simulated node is on=%v, want %v", simOn(), tc.simOnAfter)
	}
	if tc.check != nil {
		tc.check(t)
	}
}

// TestFenceIpmilan: fence_ipmilan (lanplus) against the IPMI simulator.
func TestFenceIpmilan(t *testing.T) {
	fenceagents.Require(t, "/usr/sbin/fence_ipmilan")
	fenceagents.Require(t, "ipmitool")
	var sim *ipmi.Simulator
	tests := []agentCase{
		{name: "honest BMC: verified off", password: bmcPassword, wantOff: true, check: func(t *testing.T) {
			var actions []string
			for _, c := range sim.Commands() {
				if c.Action != "" {
					actions = append(actions, c.Action)
				}
			}
			if !slices.Equal(actions, []string{"power down"}) {
				t.Fatalf("chassis control actions %q, want one power down", actions)
			}
		}},
		{name: "accepts off, stays on", password: bmcPassword, simOnAfter: true, wantInErr: "read back",
			fault: func(t *testing.T) { setIPMIFaults(t, sim, ipmi.Faults{IgnorePowerDown: true}) }},
		{name: "wrong password", password: "Wrong-Pw-1234", simOnAfter: true, wantInErr: "exit 1: exec: fence agent failed: ERROR: Failed: Unable to obtain correct plug status"},
		{name: "unreachable: error within the timeout", password: bmcPassword, simOnAfter: true, within: opts.ActionTimeout + opts.VerifyTimeout + 3*time.Second, wantInErr: "Connection timed out",
			fault: func(t *testing.T) { setIPMIFaults(t, sim, ipmi.Faults{Unreachable: true}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			sim, err = ipmi.Start(ipmi.Config{Username: bmcUser, Password: bmcPassword})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sim.Close() })
			if tc.fault != nil {
				tc.fault(t)
			}
			d := newDevice(t, exec.Config{Agent: "fence_ipmilan", Address: sim.Host(), Username: bmcUser, Password: tc.password,
				Args: map[string]string{"lanplus": "1", "ipport": strconv.Itoa(sim.Port()), "power-timeout": "3", "ipmitool-timeout": "1", "retry-on": "0"}})
			checkPowerOff(t, tc, d, sim.PoweredOn)
		})
	}
}

// TestFenceRedfish: fence_redfish against the Redfish simulator.
func TestFenceRedfish(t *testing.T) {
	fenceagents.Require(t, "/usr/sbin/fence_redfish")
	var sim *redfish.Server
	tests := []agentCase{
		{name: "honest BMC: verified off", password: bmcPassword, wantOff: true, check: func(t *testing.T) {
			var resets []string
			for _, r := range sim.Requests() {
				if r.ResetType != "" {
					resets = append(resets, r.ResetType)
				}
			}
			if !slices.Equal(resets, []string{"ForceOff"}) {
				t.Fatalf("resets %q, want one ForceOff", resets)
			}
		}},
		{name: "accepts off, stays on", password: bmcPassword, simOnAfter: true, wantInErr: "read back",
			fault: func(*testing.T) { sim.SetStaysOn(true) }},
		{name: "wrong password", password: "Wrong-Pw-1234", simOnAfter: true, wantInErr: "exit 1: exec: fence agent failed: ERROR: Unable to get PowerState"},
		{name: "unreachable: error within the timeout", password: bmcPassword, simOnAfter: true, within: opts.ActionTimeout + opts.VerifyTimeout + 3*time.Second, wantInErr: "Connection refused",
			fault: func(t *testing.T) {
				if err := sim.SetUnreachable(true); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim = redfish.New(redfish.Options{Username: bmcUser, Password: bmcPassword})
			t.Cleanup(sim.Close)
			if tc.fault != nil {
				tc.fault(t)
			}
			d := newDevice(t, exec.Config{Agent: "fence_redfish", Address: sim.Address(), Username: bmcUser, Password: tc.password,
				Args: map[string]string{"ssl-insecure": "1", "systems-uri": "/redfish/v1/Systems/1", "power-timeout": "3", "retry-on": "0"}})
			checkPowerOff(t, tc, d, func() bool { return sim.PowerState("1") == "On" })
		})
	}
}

func setIPMIFaults(t *testing.T, s *ipmi.Simulator, f ipmi.Faults) {
	t.Helper()
	if err := s.SetFaults(f); err != nil {
		t.Fatal(err)
	}
}

func newDevice(t *testing.T, cfg exec.Config) *exec.Device {
	t.Helper()
	d, err := exec.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func assertNoSecret(t *testing.T, what, text, secret string) {
	t.Helper()
	if strings.Contains(text, secret) {
		t.Fatalf("%s carries the password: %s", what, text)
	}
}

// logContext returns a context whose logger buffers every entry at the
// highest verbosity, and a function that returns what was logged.
func logContext(t *testing.T) (context.Context, func() string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(10), ktesting.BufferLogs(true)))
	underlier, ok := logger.GetSink().(ktesting.Underlier)
	if !ok {
		t.Fatal("ktesting logger without a buffer")
	}
	return klog.NewContext(context.Background(), logger), func() string { return underlier.GetBuffer().String() }
}
