// Package redfish is a Redfish BMC simulator for tests: an httptest TLS
// server on 127.0.0.1 that serves the service root, the Systems collection,
// each system's PowerState and its ComputerSystem.Reset action, the
// SessionService, and basic auth. It is enough for gofish and for the
// ClusterLabs fence_redfish agent, which reads /redfish/v1, the Systems
// collection and a system's PowerState and posts to the Reset target.
//
// A Power hook ties each system to a simulated node, and faults (latency,
// errors on chosen endpoints, rejected credentials, a ForceOff that is
// accepted but never cuts power, a delayed power-off, an unreachable BMC)
// can be set while the server runs. Every request is recorded for
// assertions; passwords and tokens are never recorded.
package redfish

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Power is the simulated node behind one system: the BMC calls Off when it
// cuts the system's power and On when it restores it. Calls happen outside
// the simulator's lock, so a hook may call back into the Server.
type Power interface {
	On(systemID string)
	Off(systemID string)
}

// FailablePower is a Power whose power-off can fail (a node that would not
// stop). When the hook implements it, the BMC calls TryOff instead of Off,
// and a failed power-off leaves the system reading On: the BMC accepted the
// reset, but nothing went off, as a lying BMC does.
type FailablePower interface {
	TryOff(systemID string) error
}

// System describes one ComputerSystem the BMC manages.
type System struct {
	// ID is the system's Id, the last segment of its URI.
	ID string
	// Off starts the system powered off; the default is On.
	Off bool
	// Power, when set, is told about every power change of the system.
	Power Power
}

// Options configure a simulator.
type Options struct {
	// Username and Password are the one account the BMC accepts.
	Username, Password string
	// Systems are the managed systems; the default is one system "1".
	Systems []System
}

// Request is one recorded request. It holds no credentials.
type Request struct {
	Method string
	Path   string
	// ResetType is the ResetType of a Reset action, empty otherwise.
	ResetType string
	// Auth is how the request authenticated: "basic", "session" or "".
	Auth string
	// Status is the HTTP status answered.
	Status int
}

// Server is a running simulator. Close it when done.
type Server struct {
	srv      *httptest.Server
	username string
	password string

	mu       sync.Mutex
	order    []string
	systems  map[string]*system
	sessions map[string]string // token → session id
	nextID   int
	created  int
	deleted  int
	requests []Request
	faults   faults
	extraLn  net.Listener // the listener after an unreachable period
	closed   chan struct{}
	once     sync.Once
}

// New starts a simulator on 127.0.0.1 with a self-signed certificate.
func New(o Options) *Server {
	if len(o.Systems) == 0 {
		o.Systems = []System{{ID: "1"}}
	}
	s := &Server{username: o.Username, password: o.Password, systems: map[string]*system{}, sessions: map[string]string{}, closed: make(chan struct{})}
	for _, sys := range o.Systems {
		state := stateOn
		if sys.Off {
			state = stateOff
		}
		s.order = append(s.order, sys.ID)
		s.systems[sys.ID] = &system{id: sys.ID, state: state, hook: sys.Power}
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.StartTLS()
	return s
}

// URL is the BMC's base URL, https://127.0.0.1:port.
func (s *Server) URL() string { return s.srv.URL }

// Address is the BMC's host:port.
func (s *Server) Address() string { return strings.TrimPrefix(s.srv.URL, "https://") }

// CertPool trusts the BMC's self-signed certificate.
func (s *Server) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(s.srv.Certificate())
	return pool
}

// Close stops the server and any pending delayed power-off.
func (s *Server) Close() {
	s.once.Do(func() { close(s.closed) })
	s.mu.Lock()
	for _, sys := range s.systems {
		sys.stopTimer()
	}
	ln := s.extraLn
	s.extraLn = nil
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	s.srv.Close()
}

// Requests returns a copy of every request recorded so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Sessions reports how many sessions were created and deleted so far.
func (s *Server) Sessions() (created, deleted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created, s.deleted
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if !s.delay(r) {
		return
	}
	rec := &statusRecorder{ResponseWriter: w}
	req := Request{Method: r.Method, Path: r.URL.Path}
	defer func() {
		req.Status = rec.status
		if req.Status == 0 {
			req.Status = http.StatusOK
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
	}()
	path := strings.TrimSuffix(r.URL.Path, "/")
	ep := endpointOf(r.Method, path)
	if s.failBefore(rec, ep) {
		return
	}
	if ep != EndpointRoot && ep != EndpointCreateSession {
		auth, ok := s.authenticate(r)
		req.Auth = auth
		if !ok {
			s.writeError(rec, s.rejectStatus(), "Base.1.8.InsufficientPrivilege", "authentication required")
			return
		}
	}
	s.route(rec, r, path, ep, &req)
}

func (s *Server) route(w *statusRecorder, r *http.Request, path string, ep Endpoint, req *Request) {
	switch ep {
	case EndpointRoot:
		s.writeJSON(w, http.StatusOK, serviceRoot(path))
	case EndpointCreateSession:
		s.createSession(w, r)
	case EndpointSession:
		s.session(w, r, path)
	case EndpointSystems:
		s.listSystems(w)
	case EndpointSystem:
		s.getSystem(w, path)
	case EndpointReset:
		s.reset(w, r, path, req)
	default:
		if path == "/redfish/v1/SessionService" && r.Method == http.MethodGet {
			s.writeJSON(w, http.StatusOK, map[string]any{
				"@odata.id": path, "@odata.type": "#SessionService.v1_1_8.SessionService", "Id": "SessionService",
				"ServiceEnabled": true, "SessionTimeout": 1800,
				"Sessions": map[string]string{"@odata.id": sessionsPath},
			})
			return
		}
		s.writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no resource at "+path)
	}
}

// authenticate accepts basic auth or a session token; it never records
// either.
func (s *Server) authenticate(r *http.Request) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.authStatus != 0 {
		return "", false
	}
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		_, ok := s.sessions[tok]
		return "session", ok
	}
	if u, p, ok := r.BasicAuth(); ok {
		return "basic", s.credentialsMatch(u, p)
	}
	return "", false
}

func (s *Server) credentialsMatch(u, p string) bool {
	uok := subtle.ConstantTimeCompare([]byte(u), []byte(s.username)) == 1
	pok := subtle.ConstantTimeCompare([]byte(p), []byte(s.password)) == 1
	return uok && pok
}

func (s *Server) createSession(w *statusRecorder, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed session request")
		return
	}
	s.mu.Lock()
	if s.faults.authStatus != 0 || !s.credentialsMatch(body.UserName, body.Password) {
		s.mu.Unlock()
		s.writeError(w, s.rejectStatus(), "Base.1.8.NoValidSession", "invalid credentials")
		return
	}
	s.nextID++
	s.created++
	id := fmt.Sprintf("%d", s.nextID)
	token := fmt.Sprintf("token-%d-%d", s.nextID, time.Now().UnixNano())
	s.sessions[token] = id
	s.mu.Unlock()
	w.Header().Set("Location", sessionsPath+"/"+id)
	w.Header().Set("X-Auth-Token", token)
	s.writeJSON(w, http.StatusCreated, map[string]any{
		"@odata.id": sessionsPath + "/" + id, "@odata.type": "#Session.v1_7_0.Session", "Id": id, "UserName": body.UserName,
	})
}

func (s *Server) session(w *statusRecorder, r *http.Request, path string) {
	id := strings.TrimPrefix(path, sessionsPath+"/")
	s.mu.Lock()
	found := ""
	for tok, sid := range s.sessions {
		if sid == id {
			found = tok
		}
	}
	if found != "" && r.Method == http.MethodDelete {
		delete(s.sessions, found)
		s.deleted++
	}
	s.mu.Unlock()
	switch {
	case found == "":
		s.writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no session "+id)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		s.writeJSON(w, http.StatusOK, map[string]any{"@odata.id": path, "@odata.type": "#Session.v1_7_0.Session", "Id": id})
	}
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers a Redfish error body, which is also JSON so that
// clients that decode every answer (fence_redfish does) see an object.
func (s *Server) writeError(w http.ResponseWriter, status int, messageID, msg string) {
	s.writeJSON(w, status, map[string]any{"error": map[string]any{
		"code": "Base.1.8.GeneralError", "message": msg,
		"@Message.ExtendedInfo": []map[string]string{{"MessageId": messageID, "Message": msg, "Severity": "Warning"}},
	}})
}

func serviceRoot(path string) map[string]any {
	if path == "/redfish" {
		return map[string]any{"v1": "/redfish/v1/"}
	}
	return map[string]any{
		"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
		"Id": "RootService", "Name": "Fenceline simulated BMC", "RedfishVersion": "1.17.0",
		"UUID":           "00000000-0000-0000-0000-00000000f3c1",
		"Systems":        map[string]string{"@odata.id": systemsPath},
		"SessionService": map[string]string{"@odata.id": "/redfish/v1/SessionService"},
		"Links":          map[string]any{"Sessions": map[string]string{"@odata.id": sessionsPath}},
	}
}

// tlsConfig is the server's TLS configuration, reused when the listener
// comes back after an unreachable period.
func (s *Server) tlsConfig() *tls.Config { return s.srv.TLS }
