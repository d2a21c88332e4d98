package redfish

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*Server)
		status int    // answer to ForceOff
		state  string // PowerState right after
	}{
		{"honest", func(*Server) {}, 204, "Off"},
		{"stays on", func(s *Server) { s.SetStaysOn(true) }, 204, "On"},
		{"off delayed", func(s *Server) { s.SetOffDelay(time.Hour) }, 204, "PoweringOff"},
		{"5xx before the action", func(s *Server) { s.SetFailure(EndpointReset, Failure{Status: 500}) }, 500, "On"},
		{"5xx after the action", func(s *Server) { s.SetFailure(EndpointReset, Failure{Status: 503, AfterAction: true}) }, 503, "Off"},
		{"credentials rejected", func(s *Server) { s.SetAuthFailure(http.StatusForbidden) }, 403, "On"},
		{"system endpoint fails only", func(s *Server) { s.SetFailure(EndpointSystem, Failure{Status: 500}) }, 204, "Off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{Username: testUser, Password: testPassword})
			defer s.Close()
			tc.set(s)
			c := newClient(t, s)
			if st := reset(c, "1", "ForceOff"); st != tc.status {
				t.Fatalf("ForceOff: status %d, want %d", st, tc.status)
			}
			if got := s.PowerState("1"); got != tc.state {
				t.Fatalf("PowerState %q, want %q", got, tc.state)
			}
		})
	}
}

func TestOffDelayCallsHook(t *testing.T) {
	h := newHook()
	s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Power: h}}})
	defer s.Close()
	s.SetOffDelay(50 * time.Millisecond)
	c := newClient(t, s)
	if st := reset(c, "1", "ForceOff"); st != 204 {
		t.Fatalf("ForceOff: status %d", st)
	}
	waitEvent(t, h, "off 1")
	// The state reads Off once the hook has returned.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return s.PowerState("1") == "Off", nil
	}); err != nil {
		t.Fatalf("PowerState %q after the delay, want Off: %v", s.PowerState("1"), err)
	}
}

func TestConflictAndStaleReads(t *testing.T) {
	s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Off: true}}})
	defer s.Close()
	c := newClient(t, s)
	if st := reset(c, "1", "ForceOff"); st != 204 {
		t.Fatalf("idempotent ForceOff: status %d, want 204", st)
	}
	s.SetConflictWhenUnchanged(true)
	if st := reset(c, "1", "ForceOff"); st != 409 {
		t.Fatalf("ForceOff of an off system: status %d, want 409", st)
	}
	s.SetStaleReads("On", 1)
	for i, want := range []string{"On", "Off"} {
		if _, _, sys := c.do(http.MethodGet, systemsPath+"/1", testUser, "", nil); sys["PowerState"] != want {
			t.Fatalf("read %d: PowerState %v, want %s", i, sys["PowerState"], want)
		}
	}
}

func TestLatency(t *testing.T) {
	s := New(Options{Username: testUser, Password: testPassword})
	defer s.Close()
	c := newClient(t, s)
	const d = 100 * time.Millisecond
	s.SetLatency(d)
	start := time.Now()
	if st, _, _ := c.do(http.MethodGet, "/redfish/v1", "", "", nil); st != 200 {
		t.Fatalf("status %d", st)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("answer took %v, less than the latency %v", took, d)
	}
}

func TestUnreachable(t *testing.T) {
	s := New(Options{Username: testUser, Password: testPassword})
	defer s.Close()
	c := newClient(t, s)
	if err := s.SetUnreachable(true); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.http.Get(s.URL() + "/redfish/v1"); err == nil {
		resp.Body.Close()
		t.Fatalf("unreachable BMC answered %d", resp.StatusCode)
	}
	if err := s.SetUnreachable(false); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := c.do(http.MethodGet, "/redfish/v1", "", "", nil); st != 200 {
		t.Fatalf("BMC back: status %d", st)
	}
}

// TestForceOffWhileReadingOff: a BMC whose reads are stale (Off while the
// node runs) still carries a ForceOff out on the real power, as a real BMC
// does: the hook is called and the system is off once the reads are fresh.
func TestForceOffWhileReadingOff(t *testing.T) {
	node := newHook()
	s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Power: node}}})
	defer s.Close()
	c := newClient(t, s)
	s.SetStaleReads("Off", 1)
	if _, _, sys := c.do(http.MethodGet, systemsPath+"/1", testUser, "", nil); sys["PowerState"] != "Off" {
		t.Fatalf("stale read: PowerState %v, want Off", sys["PowerState"])
	}
	s.SetStaleReads("Off", 1<<10)
	if st := reset(c, "1", "ForceOff"); st != 204 {
		t.Fatalf("ForceOff while reading Off: status %d, want 204", st)
	}
	s.SetStaleReads("", 0)
	if got := node.list(); s.PowerState("1") != "Off" || !slices.Equal(got, []string{"off 1"}) {
		t.Fatalf("after ForceOff: PowerState %q, hook calls %q; want Off, one power-off", s.PowerState("1"), got)
	}
}
