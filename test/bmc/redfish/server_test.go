package redfish

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testUser     = "admin"
	testPassword = "sim-Pa55w0rd!"
)

// hook records the power changes the BMC reports to its node.
type hook struct {
	mu     sync.Mutex
	events []string
	ch     chan string
}

func newHook() *hook { return &hook{ch: make(chan string, 16)} }

func (h *hook) On(id string)  { h.record("on " + id) }
func (h *hook) Off(id string) { h.record("off " + id) }

func (h *hook) record(e string) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
	h.ch <- e
}

func (h *hook) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

type client struct {
	t    *testing.T
	s    *Server
	http *http.Client
}

func newClient(t *testing.T, s *Server) *client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CertPool(), MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, s: s, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// do sends a request with basic auth unless user is empty; it returns the
// status and the decoded JSON body (nil when empty).
func (c *client) do(method, path, user, body string, hdr map[string]string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.s.URL()+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, testPassword)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

func reset(c *client, id, rt string) int {
	st, _, _ := c.do(http.MethodPost, systemsPath+"/"+id+resetSuffix, testUser, `{"ResetType":"`+rt+`"}`, nil)
	return st
}

func waitEvent(t *testing.T, h *hook, want string) {
	t.Helper()
	select {
	case got := <-h.ch:
		if got != want {
			t.Fatalf("hook got %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("hook never got %q", want)
	}
}

func TestRoutesAndAuth(t *testing.T) {
	s := New(Options{Username: testUser, Password: testPassword})
	defer s.Close()
	c := newClient(t, s)
	for _, tc := range []struct {
		name, method, path, user string
		want                     int
	}{
		{"version document", http.MethodGet, "/redfish", "", 200},
		{"service root unauthenticated", http.MethodGet, "/redfish/v1", "", 200},
		{"service root with slash", http.MethodGet, "/redfish/v1/", "", 200},
		{"systems need auth", http.MethodGet, systemsPath, "", 401},
		{"wrong user", http.MethodGet, systemsPath, "nobody", 401},
		{"systems with basic auth", http.MethodGet, systemsPath, testUser, 200},
		{"system", http.MethodGet, systemsPath + "/1/", testUser, 200},
		{"unknown system", http.MethodGet, systemsPath + "/9", testUser, 404},
		{"session service", http.MethodGet, "/redfish/v1/SessionService", testUser, 200},
		{"unknown resource", http.MethodGet, "/redfish/v1/Chassis", testUser, 404},
		{"reset needs POST", http.MethodGet, systemsPath + "/1" + resetSuffix, testUser, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, _, _ := c.do(tc.method, tc.path, tc.user, "", nil); st != tc.want {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.path, st, tc.want)
			}
		})
	}
	_, _, root := c.do(http.MethodGet, "/redfish/v1", "", "", nil)
	if sys, _ := root["Systems"].(map[string]any); sys["@odata.id"] != systemsPath {
		t.Errorf("service root Systems = %v", root["Systems"])
	}
	_, _, system := c.do(http.MethodGet, systemsPath+"/1", testUser, "", nil)
	actions, _ := system["Actions"].(map[string]any)
	rst, _ := actions["#ComputerSystem.Reset"].(map[string]any)
	if rst["target"] != systemsPath+"/1"+resetSuffix || system["PowerState"] != "On" {
		t.Errorf("system resource = %v", system)
	}
}

func TestSessions(t *testing.T) {
	s := New(Options{Username: testUser, Password: testPassword})
	defer s.Close()
	c := newClient(t, s)
	if st, _, _ := c.do(http.MethodPost, sessionsPath, "", `{"UserName":"admin","Password":"wrong"}`, nil); st != 401 {
		t.Fatalf("bad password: status %d, want 401", st)
	}
	st, hdr, _ := c.do(http.MethodPost, sessionsPath, "", `{"UserName":"admin","Password":"`+testPassword+`"}`, nil)
	if st != 201 || hdr.Get("X-Auth-Token") == "" || !strings.HasPrefix(hdr.Get("Location"), sessionsPath+"/") {
		t.Fatalf("create session: status %d, headers %v", st, hdr)
	}
	tok := map[string]string{"X-Auth-Token": hdr.Get("X-Auth-Token")}
	if st, _, _ := c.do(http.MethodGet, systemsPath, "", "", tok); st != 200 {
		t.Fatalf("token auth: status %d", st)
	}
	if st, _, _ := c.do(http.MethodDelete, hdr.Get("Location"), "", "", tok); st != 204 {
		t.Fatalf("delete session: status %d", st)
	}
	if st, _, _ := c.do(http.MethodGet, systemsPath, "", "", tok); st != 401 {
		t.Fatalf("deleted token still accepted: status %d", st)
	}
	if created, deleted := s.Sessions(); created != 1 || deleted != 1 {
		t.Fatalf("sessions created %d deleted %d, want 1 and 1", created, deleted)
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.Method+r.Path+r.ResetType+r.Auth, testPassword) {
			t.Fatalf("request record holds the password: %+v", r)
		}
	}
}

func TestResetTypes(t *testing.T) {
	h := newHook()
	s := New(Options{Username: testUser, Password: testPassword, Systems: []System{{ID: "1", Power: h}, {ID: "2", Off: true}}})
	defer s.Close()
	c := newClient(t, s)
	for _, tc := range []struct {
		resetType, want string
		status          int
		events          []string
	}{
		{"ForceOff", "Off", 204, []string{"off 1"}},
		{"ForceOff", "Off", 204, nil},
		{"On", "On", 204, []string{"on 1"}},
		{"ForceRestart", "On", 204, []string{"off 1", "on 1"}},
		{"GracefulShutdown", "Off", 204, []string{"off 1"}},
		{"Nmi", "Off", 400, nil},
	} {
		before := len(h.list())
		if st := reset(c, "1", tc.resetType); st != tc.status {
			t.Fatalf("%s: status %d, want %d", tc.resetType, st, tc.status)
		}
		if got := s.PowerState("1"); got != tc.want {
			t.Fatalf("%s: PowerState %q, want %q", tc.resetType, got, tc.want)
		}
		if got := h.list()[before:]; strings.Join(got, ",") != strings.Join(tc.events, ",") {
			t.Fatalf("%s: hook events %v, want %v", tc.resetType, got, tc.events)
		}
	}
	if got := s.PowerState("2"); got != "Off" {
		t.Fatalf("system 2 changed to %q", got)
	}
	reqs := s.Requests()
	if last := reqs[len(reqs)-1]; last.ResetType != "Nmi" || last.Status != 400 || last.Auth != "basic" {
		t.Fatalf("last request recorded as %+v", last)
	}
}
