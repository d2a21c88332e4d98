package redfish

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Failure makes an endpoint answer an error status.
type Failure struct {
	// Status is the HTTP status to answer, such as 500 or 503; 0 clears.
	Status int
	// AfterAction, for EndpointReset only, carries the reset out and then
	// answers Status: a BMC that cuts power and still reports an error.
	AfterAction bool
}

// faults are the runtime fault modes; the Server's lock guards them.
type faults struct {
	latency               time.Duration
	failures              map[Endpoint]Failure
	authStatus            int
	staysOn               bool
	offDelay              time.Duration
	conflictWhenUnchanged bool
	unreachable           bool
	staleState            string
	staleReads            int
}

// SetLatency delays every answer by d (0 clears). A delayed request ends
// early when its client goes away.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.latency = d
}

// SetFailure makes requests to ep answer f.Status; a zero Failure clears.
func (s *Server) SetFailure(ep Endpoint, f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.failures == nil {
		s.faults.failures = map[Endpoint]Failure{}
	}
	if f.Status == 0 {
		delete(s.faults.failures, ep)
		return
	}
	s.faults.failures[ep] = f
}

// SetAuthFailure makes the BMC reject every credential and session with
// status (401 or 403); 0 restores normal authentication.
func (s *Server) SetAuthFailure(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.authStatus = status
}

// SetStaysOn makes ForceOff and GracefulShutdown succeed (204) without
// changing the power state: the lying BMC a read-back must catch.
func (s *Server) SetStaysOn(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.staysOn = on
}

// SetOffDelay makes a power-off take d: the system reads PoweringOff until
// then, and its Power hook is told at the end. 0 powers off at once.
func (s *Server) SetOffDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.offDelay = d
}

// SetConflictWhenUnchanged makes a reset to the state a system is already
// in answer 409 Conflict, as some vendors do ("already powered off"),
// instead of 204.
func (s *Server) SetConflictWhenUnchanged(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.conflictWhenUnchanged = on
}

// SetStaleReads makes the next n reads of a system report state instead
// of the real one: a BMC that caches PowerState.
func (s *Server) SetStaleReads(state string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.staleState, s.faults.staleReads = state, n
}

// SetUnreachable closes the listener and every open connection, so that
// connections are refused; false listens again on the same address. A
// delayed power-off still completes while the BMC is unreachable.
func (s *Server) SetUnreachable(down bool) error {
	s.mu.Lock()
	if s.faults.unreachable == down {
		s.mu.Unlock()
		return nil
	}
	s.faults.unreachable = down
	ln := s.extraLn
	s.extraLn = nil
	s.mu.Unlock()
	if down {
		if ln == nil {
			ln = s.srv.Listener
		}
		err := ln.Close()
		s.srv.CloseClientConnections()
		if err != nil {
			return fmt.Errorf("close BMC listener: %w", err)
		}
		return nil
	}
	raw, err := net.Listen("tcp", s.Address())
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", s.Address(), err)
	}
	tlsLn := tls.NewListener(raw, s.tlsConfig())
	s.mu.Lock()
	s.extraLn = tlsLn
	s.mu.Unlock()
	go func() { _ = s.srv.Config.Serve(tlsLn) }()
	return nil
}

// failBefore answers an injected failure for ep, unless it is meant to
// follow the reset action; it reports whether it answered.
func (s *Server) failBefore(w http.ResponseWriter, ep Endpoint) bool {
	s.mu.Lock()
	f, ok := s.faults.failures[ep]
	s.mu.Unlock()
	if !ok || (f.AfterAction && ep == EndpointReset) {
		return false
	}
	s.writeError(w, f.Status, "Base.1.8.InternalError", "injected failure")
	return true
}

func (s *Server) rejectStatus() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults.authStatus != 0 {
		return s.faults.authStatus
	}
	return http.StatusUnauthorized
}

// delay waits out the injected latency; false means the client went away
// or the server closed first.
func (s *Server) delay(r *http.Request) bool {
	s.mu.Lock()
	d := s.faults.latency
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closed:
		return false
	}
}
