package redfish_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
	bmc "fenceline.io/fenceline/test/bmc/redfish"
)

// node counts the power changes its BMC reports.
type node struct{ offs, ons atomic.Int32 }

func (n *node) On(string)  { n.ons.Add(1) }
func (n *node) Off(string) { n.offs.Add(1) }

// fast are short power options; the verify timeout is what a case waits
// at most for a state that never comes.
var fast = power.Options{ActionTimeout: 3 * time.Second, VerifyTimeout: 400 * time.Millisecond, PollInterval: 20 * time.Millisecond}

// TestPowerOffFaults drives the method through power.PowerOff against each
// fault mode of the simulated BMC: only a read-back Off is success.
func TestPowerOffFaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		systems  []string
		set      func(*bmc.Server)
		opts     func(*power.Options)
		wantOff  bool
		wantErrs []error
		check    func(t *testing.T, s *bmc.Server, n *node, res power.Result, err error)
	}{{
		name: "honest BMC: verified off", wantOff: true,
		check: func(t *testing.T, s *bmc.Server, n *node, res power.Result, _ error) {
			rs := resets(s)
			if len(rs) != 1 || rs[0].ResetType != "ForceOff" || rs[0].Status != http.StatusNoContent || rs[0].Auth != "session" {
				t.Fatalf("resets %+v, want one ForceOff in a session", rs)
			}
			if n.offs.Load() != 1 || res.Attempts != 1 {
				t.Fatalf("node saw %d power-offs, attempts %d", n.offs.Load(), res.Attempts)
			}
		},
	}, {
		name: "accepts ForceOff but stays on: never verified",
		set:  func(s *bmc.Server) { s.SetStaysOn(true) },
		opts: func(o *power.Options) { o.Retries = 1 }, wantErrs: []error{power.ErrNotVerified},
		check: func(t *testing.T, s *bmc.Server, n *node, res power.Result, _ error) {
			if res.Verified != power.StateOn || res.Attempts != 2 || len(resets(s)) != 2 || n.offs.Load() != 0 {
				t.Fatalf("result %+v, %d resets, node offs %d: want On after 2 accepted attempts", res, len(resets(s)), n.offs.Load())
			}
		},
	}, {
		name: "powers off after a delay within the verify timeout: verified",
		set:  func(s *bmc.Server) { s.SetOffDelay(150 * time.Millisecond) },
		opts: func(o *power.Options) { o.VerifyTimeout = 10 * time.Second }, wantOff: true,
		check: func(t *testing.T, s *bmc.Server, n *node, _ power.Result, _ error) {
			if n.offs.Load() != 1 || len(resets(s)) != 1 {
				t.Fatalf("node offs %d, resets %d, want 1 and 1", n.offs.Load(), len(resets(s)))
			}
		},
	}, {
		name: "powers off after the verify timeout: PoweringOff is not off",
		set:  func(s *bmc.Server) { s.SetOffDelay(time.Hour) }, wantErrs: []error{power.ErrNotVerified},
		check: func(t *testing.T, _ *bmc.Server, _ *node, res power.Result, _ error) {
			if res.Verified != power.StateUnknown {
				t.Fatalf("last read %s, want Unknown (PoweringOff)", res.Verified)
			}
		},
	}, {
		name: "5xx on reset but power goes off: verified by read-back", wantOff: true,
		set: func(s *bmc.Server) { s.SetFailure(bmc.EndpointReset, bmc.Failure{Status: 503, AfterAction: true}) },
		check: func(t *testing.T, s *bmc.Server, _ *node, _ power.Result, _ error) {
			if rs := resets(s); len(rs) != 1 || rs[0].Status != 503 {
				t.Fatalf("resets %+v, want one answered 503", rs)
			}
		},
	}, {
		name: "5xx on reset and power stays on: not verified",
		set:  func(s *bmc.Server) { s.SetFailure(bmc.EndpointReset, bmc.Failure{Status: 500}) }, wantErrs: []error{power.ErrNotVerified},
		check: func(t *testing.T, _ *bmc.Server, _ *node, _ power.Result, err error) {
			var he *redfish.HTTPError
			if !errors.As(err, &he) || he.StatusCode != 500 {
				t.Fatalf("error %v does not carry the BMC's 500", err)
			}
		},
	}, {
		name: "credentials rejected (401): ErrAuth",
		set:  func(s *bmc.Server) { s.SetAuthFailure(http.StatusUnauthorized) }, wantErrs: []error{redfish.ErrAuth, power.ErrNotVerified},
	}, {
		name: "credentials rejected (403): ErrAuth",
		set:  func(s *bmc.Server) { s.SetAuthFailure(http.StatusForbidden) }, wantErrs: []error{redfish.ErrAuth, power.ErrNotVerified},
	}, {
		name: "unreachable BMC: ErrUnreachable",
		set: func(s *bmc.Server) {
			if err := s.SetUnreachable(true); err != nil {
				panic(err)
			}
		},
		wantErrs: []error{redfish.ErrUnreachable, power.ErrNotVerified},
	}, {
		name: "BMC slower than the action timeout: ErrUnreachable",
		set:  func(s *bmc.Server) { s.SetLatency(time.Hour) },
		opts: func(o *power.Options) { o.ActionTimeout = 100 * time.Millisecond }, wantErrs: []error{redfish.ErrUnreachable, power.ErrNotVerified},
	}, {
		name: "system reads fail: not verified", wantErrs: []error{power.ErrNotVerified},
		set: func(s *bmc.Server) { s.SetFailure(bmc.EndpointSystem, bmc.Failure{Status: 500}) },
	}, {
		name: "several systems and no systemID: clear error, nothing reset", systems: []string{"1", "2"},
		wantErrs: []error{redfish.ErrAmbiguousSystem, power.ErrNotVerified},
		check: func(t *testing.T, s *bmc.Server, _ *node, _ power.Result, err error) {
			if len(resets(s)) != 0 || !strings.Contains(err.Error(), "set systemID") {
				t.Fatalf("resets %+v, error %v", resets(s), err)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := &node{}
			var systems []bmc.System
			for _, id := range tc.systems {
				systems = append(systems, bmc.System{ID: id, Power: n})
			}
			if systems == nil {
				systems = []bmc.System{{ID: "1", Power: n}}
			}
			s := newBMC(t, systems...)
			if tc.set != nil {
				tc.set(s)
			}
			d := newDevice(t, s, nil)
			o := fast
			if tc.opts != nil {
				tc.opts(&o)
			}
			ctx, logs := logContext(t)
			res, err := power.PowerOff(ctx, d, o, time.Now)
			if got := err == nil && res.Verified == power.StateOff; got != tc.wantOff {
				t.Fatalf("verified off = %v (result %+v, err %v), want %v", got, res, err, tc.wantOff)
			}
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Fatalf("error %v does not wrap %v", err, want)
				}
			}
			if tc.check != nil {
				tc.check(t, s, n, res, err)
			}
			assertSessionsClosed(t, s)
			if err != nil {
				assertNoCredentials(t, "error", err.Error())
			}
			assertNoCredentials(t, "log", logs())
		})
	}
}
