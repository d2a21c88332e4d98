package redfish_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/redfish"
	bmc "fenceline.io/fenceline/test/bmc/redfish"
)

func TestStatusMapping(t *testing.T) {
	s := newBMC(t)
	d := newDevice(t, s, nil)
	for _, tc := range []struct {
		reported string
		want     power.State
	}{
		{"On", power.StateOn},
		{"Off", power.StateOff},
		{"PoweringOn", power.StateUnknown},
		{"PoweringOff", power.StateUnknown},
		{"Paused", power.StateUnknown},
		{"", power.StateUnknown},
		{"off", power.StateUnknown},
	} {
		t.Run(tc.reported, func(t *testing.T) {
			s.SetPowerState("1", tc.reported)
			got, err := d.Status(context.Background())
			if err != nil || got != tc.want {
				t.Fatalf("PowerState %q read as %s (err %v), want %s", tc.reported, got, err, tc.want)
			}
		})
	}
	assertSessionsClosed(t, s)
}

func TestOffAndOn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		startOff   bool
		set        func(*bmc.Server)
		call       func(*redfish.Device, context.Context) error
		wantState  string
		wantResets []int // statuses of the Reset requests sent
	}{
		{name: "off", call: (*redfish.Device).Off, wantState: "Off", wantResets: []int{204}},
		{name: "off when already off is still sent", startOff: true, call: (*redfish.Device).Off, wantState: "Off", wantResets: []int{204}},
		{name: "off when already off, refused as such (409), is success", startOff: true,
			set:  func(s *bmc.Server) { s.SetConflictWhenUnchanged(true) },
			call: (*redfish.Device).Off, wantState: "Off", wantResets: []int{409}},
		{name: "off while the BMC wrongly reads Off cuts the power",
			set:  func(s *bmc.Server) { s.SetStaleReads("Off", 1<<10) },
			call: (*redfish.Device).Off, wantState: "Off", wantResets: []int{204}},
		{name: "already-off refusal (409) after a stale On read is success", startOff: true,
			set:  func(s *bmc.Server) { s.SetConflictWhenUnchanged(true); s.SetStaleReads("On", 1) },
			call: (*redfish.Device).Off, wantState: "Off", wantResets: []int{409}},
		{name: "on", startOff: true, call: (*redfish.Device).On, wantState: "On", wantResets: []int{204}},
		{name: "on when already on sends nothing", call: (*redfish.Device).On, wantState: "On"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newBMC(t, bmc.System{ID: "1", Off: tc.startOff})
			if tc.set != nil {
				tc.set(s)
			}
			d := newDevice(t, s, nil)
			if err := tc.call(d, context.Background()); err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, r := range resets(s) {
				got = append(got, r.Status)
			}
			if s.PowerState("1") != tc.wantState || len(got) != len(tc.wantResets) || (len(got) > 0 && got[0] != tc.wantResets[0]) {
				t.Fatalf("state %s, reset statuses %v; want %s, %v", s.PowerState("1"), got, tc.wantState, tc.wantResets)
			}
			assertSessionsClosed(t, s)
		})
	}
}

func TestSystemSelection(t *testing.T) {
	for _, tc := range []struct {
		name, systemID string
		ids            []string
		wantErr        error
		wantReset      string // the system that must read Off
	}{
		{name: "only system", ids: []string{"System.Embedded.1"}, wantReset: "System.Embedded.1"},
		{name: "by Id", systemID: "2", ids: []string{"1", "2"}, wantReset: "2"},
		{name: "by URI", systemID: "/redfish/v1/Systems/2", ids: []string{"1", "2"}, wantReset: "2"},
		{name: "several, none chosen", ids: []string{"1", "2"}, wantErr: redfish.ErrAmbiguousSystem},
		{name: "unknown Id", systemID: "9", ids: []string{"1", "2"}, wantErr: redfish.ErrSystemNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var systems []bmc.System
			for _, id := range tc.ids {
				systems = append(systems, bmc.System{ID: id})
			}
			s := newBMC(t, systems...)
			d := newDevice(t, s, func(c *redfish.Config) { c.SystemID = tc.systemID })
			err := d.Off(context.Background())
			if !errors.Is(err, tc.wantErr) || (err != nil && tc.wantErr == nil) {
				t.Fatalf("Off: %v, want %v", err, tc.wantErr)
			}
			for _, id := range tc.ids {
				if off := s.PowerState(id) == "Off"; off != (id == tc.wantReset) {
					t.Fatalf("system %s reads %s", id, s.PowerState(id))
				}
			}
			if tc.wantErr != nil && !strings.Contains(err.Error(), `"1" "2"`) {
				t.Fatalf("error %q does not list the BMC's systems", err)
			}
			assertSessionsClosed(t, s)
		})
	}
}

// TestSessions: sessions opened equal sessions deleted after successes,
// errors and a call whose context is cancelled mid-way; a BMC without a
// session service gets basic auth from then on.
func TestSessions(t *testing.T) {
	t.Run("every call closes its session", func(t *testing.T) {
		s := newBMC(t)
		d := newDevice(t, s, nil)
		ctx := context.Background()
		_, _ = d.Status(ctx)
		_ = d.Off(ctx)
		s.SetFailure(bmc.EndpointSystem, bmc.Failure{Status: 500})
		if err := d.On(ctx); err == nil {
			t.Fatal("On succeeded while the system answers 500")
		}
		if created, _ := s.Sessions(); created != 3 {
			t.Fatalf("created %d sessions for 3 calls", created)
		}
		assertSessionsClosed(t, s)
	})
	t.Run("cancelled call still deletes its session", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := newBMC(t, bmc.System{ID: "1", Power: cancelOnOff(cancel)})
		d := newDevice(t, s, nil)
		_ = d.Off(ctx) // the node's power-off cancels the call's context
		if ctx.Err() == nil {
			t.Fatal("the hook never cancelled the call")
		}
		if created, _ := s.Sessions(); created != 1 {
			t.Fatalf("created %d sessions, want 1", created)
		}
		assertSessionsClosed(t, s)
	})
	t.Run("no session service: basic auth", func(t *testing.T) {
		s := newBMC(t)
		s.SetFailure(bmc.EndpointCreateSession, bmc.Failure{Status: http.StatusMethodNotAllowed})
		d := newDevice(t, s, nil)
		for range 2 {
			if st, err := d.Status(context.Background()); err != nil || st != power.StateOn {
				t.Fatalf("Status: %s, %v", st, err)
			}
		}
		posts := 0
		for _, r := range s.Requests() {
			if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/Sessions") {
				posts++
			}
			if strings.HasPrefix(r.Path, "/redfish/v1/Systems") && r.Auth != "basic" {
				t.Fatalf("request %+v not in basic auth", r)
			}
		}
		if posts != 1 {
			t.Fatalf("%d session attempts, want 1 then basic auth for good", posts)
		}
	})
}

type cancelOnOff context.CancelFunc

func (c cancelOnOff) On(string)  {}
func (c cancelOnOff) Off(string) { c() }

func TestContextHonoured(t *testing.T) {
	s := newBMC(t)
	s.SetLatency(time.Hour)
	d := newDevice(t, s, func(c *redfish.Config) { c.Timeout = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := d.Status(ctx); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redfish.ErrUnreachable) {
			t.Fatalf("Status: %v, want a deadline error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Status ignored its context")
	}
}

func TestTLS(t *testing.T) {
	s := newBMC(t)
	for _, tc := range []struct {
		name    string
		mutate  func(*redfish.Config)
		wantErr error
	}{
		{"untrusted certificate", func(c *redfish.Config) { c.RootCAs = nil }, redfish.ErrTLS},
		{"trusted CA", nil, nil},
		{"insecure", func(c *redfish.Config) { c.RootCAs, c.InsecureTLS = nil, true }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newDevice(t, s, tc.mutate).Status(context.Background())
			if !errors.Is(err, tc.wantErr) || (err != nil && tc.wantErr == nil) {
				t.Fatalf("Status: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     redfish.Config
		wantErr string
	}{
		{"host", redfish.Config{Address: "bmc.example", Username: "u"}, ""},
		{"host:port", redfish.Config{Address: "10.0.0.5:8443", Username: "u"}, ""},
		{"https URL with root path", redfish.Config{Address: "https://[fd00::5]:443/redfish/v1/", Username: "u"}, ""},
		{"PushPowerButton", redfish.Config{Address: "bmc", Username: "u", ResetType: "PushPowerButton"}, ""},
		{"empty address", redfish.Config{Username: "u"}, "address is empty"},
		{"http", redfish.Config{Address: "http://bmc", Username: "u"}, "only https"},
		{"credentials in address", redfish.Config{Address: "https://u:" + password + "@bmc", Username: "u"}, "not the address"},
		{"other path", redfish.Config{Address: "https://bmc/api", Username: "u"}, "unexpected path"},
		{"no username", redfish.Config{Address: "bmc"}, "username is empty"},
		{"graceful reset cannot fence", redfish.Config{Address: "bmc", Username: "u", ResetType: "GracefulShutdown"}, "cannot fence"},
		{"negative timeout", redfish.Config{Address: "bmc", Username: "u", Timeout: -time.Second}, "negative timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redfish.New(tc.cfg)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("New: %v, want %q", err, tc.wantErr)
			}
			if err != nil {
				assertNoCredentials(t, "config error", err.Error())
			}
		})
	}
}

// TestResetTypeNotAllowed: a reset type the system does not list in
// ResetType@Redfish.AllowableValues is refused before it is sent.
func TestResetTypeNotAllowed(t *testing.T) {
	s := newBMC(t)
	d := newDevice(t, s, func(c *redfish.Config) { c.ResetType = "PushPowerButton" })
	err := d.Off(context.Background())
	if err == nil || !strings.Contains(err.Error(), "PushPowerButton") {
		t.Fatalf("Off: %v, want a refusal naming the reset type", err)
	}
	if rs := resets(s); len(rs) != 0 || s.PowerState("1") != "On" {
		t.Fatalf("resets %+v, state %s: the reset was sent", rs, s.PowerState("1"))
	}
	assertSessionsClosed(t, s)
}
