package redfish

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

const (
	systemsPath  = "/redfish/v1/Systems"
	sessionsPath = "/redfish/v1/SessionService/Sessions"
	resetSuffix  = "/Actions/ComputerSystem.Reset"

	stateOn          = "On"
	stateOff         = "Off"
	statePoweringOff = "PoweringOff"
)

// ResetTypes are the reset types the simulated systems accept, as listed
// in ResetType@Redfish.AllowableValues.
var ResetTypes = []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart"}

// Endpoint names a group of URIs for fault injection.
type Endpoint string

// The endpoints the simulator serves.
const (
	EndpointRoot          Endpoint = "Root"          // /redfish, /redfish/v1
	EndpointCreateSession Endpoint = "CreateSession" // POST .../Sessions
	EndpointSession       Endpoint = "Session"       // .../Sessions/{id}
	EndpointSystems       Endpoint = "Systems"       // /redfish/v1/Systems
	EndpointSystem        Endpoint = "System"        // /redfish/v1/Systems/{id}
	EndpointReset         Endpoint = "Reset"         // .../Actions/ComputerSystem.Reset
	EndpointOther         Endpoint = "Other"
)

func endpointOf(method, path string) Endpoint {
	switch {
	case path == "/redfish" || path == "/redfish/v1":
		return EndpointRoot
	case path == sessionsPath && method == http.MethodPost:
		return EndpointCreateSession
	case strings.HasPrefix(path, sessionsPath+"/"):
		return EndpointSession
	case path == systemsPath:
		return EndpointSystems
	case strings.HasPrefix(path, systemsPath+"/") && strings.HasSuffix(path, resetSuffix):
		return EndpointReset
	case strings.HasPrefix(path, systemsPath+"/") && !strings.Contains(strings.TrimPrefix(path, systemsPath+"/"), "/"):
		return EndpointSystem
	}
	return EndpointOther
}

// system is one ComputerSystem; the Server's lock guards it.
type system struct {
	id    string
	state string
	hook  Power
	timer *time.Timer
	// gen counts power changes, so that a power-off whose hook is done
	// reads Off only if nothing changed the power meanwhile.
	gen int
}

func (sys *system) stopTimer() {
	sys.gen++
	if sys.timer != nil {
		sys.timer.Stop()
		sys.timer = nil
	}
}

func (sys *system) resource() map[string]any {
	uri := systemsPath + "/" + sys.id
	return map[string]any{
		"@odata.id": uri, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
		"Id": sys.id, "Name": "Simulated node " + sys.id, "SystemType": "Physical",
		"PowerState": sys.state,
		"Status":     map[string]string{"State": "Enabled", "Health": "OK"},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target":                            uri + resetSuffix,
			"ResetType@Redfish.AllowableValues": ResetTypes,
		}},
	}
}

// PowerState is a system's PowerState as the BMC reports it; empty for an
// unknown system.
func (s *Server) PowerState(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sys := s.systems[id]; sys != nil {
		return sys.state
	}
	return ""
}

// SetPowerState sets the reported PowerState of a system (any string, such
// as "Paused" or ""), without calling its Power hook.
func (s *Server) SetPowerState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sys := s.systems[id]; sys != nil {
		sys.stopTimer()
		sys.state = state
	}
}

func (s *Server) listSystems(w http.ResponseWriter) {
	s.mu.Lock()
	members := make([]map[string]string, 0, len(s.order))
	for _, id := range s.order {
		members = append(members, map[string]string{"@odata.id": systemsPath + "/" + id})
	}
	s.mu.Unlock()
	s.writeJSON(w, http.StatusOK, map[string]any{
		"@odata.id": systemsPath, "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
		"Name": "Computer System Collection", "Members@odata.count": len(members), "Members": members,
	})
}

func (s *Server) getSystem(w http.ResponseWriter, path string) {
	s.mu.Lock()
	sys := s.systems[strings.TrimPrefix(path, systemsPath+"/")]
	var body map[string]any
	if sys != nil {
		body = sys.resource()
		if s.faults.staleReads > 0 {
			s.faults.staleReads--
			body["PowerState"] = s.faults.staleState
		}
	}
	s.mu.Unlock()
	if body == nil {
		s.writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no system at "+path)
		return
	}
	s.writeJSON(w, http.StatusOK, body)
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request, path string, req *Request) {
	if r.Method != http.MethodPost {
		s.writeError(w, http.StatusMethodNotAllowed, "Base.1.8.OperationNotAllowed", "POST only")
		return
	}
	var body struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		s.writeError(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "malformed reset request")
		return
	}
	req.ResetType = body.ResetType
	id := strings.TrimSuffix(strings.TrimPrefix(path, systemsPath+"/"), resetSuffix)
	s.mu.Lock()
	sys := s.systems[id]
	if sys == nil {
		s.mu.Unlock()
		s.writeError(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", "no system "+id)
		return
	}
	hooks, unchanged, ok := s.apply(sys, body.ResetType)
	conflict := unchanged && s.faults.conflictWhenUnchanged
	after := s.faults.failures[EndpointReset]
	s.mu.Unlock()
	for _, h := range hooks {
		h()
	}
	switch {
	case !ok:
		s.writeError(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList", "unsupported ResetType")
	case after.AfterAction && after.Status != 0:
		s.writeError(w, after.Status, "Base.1.8.InternalError", "injected failure after the action")
	case conflict:
		s.writeError(w, http.StatusConflict, "Base.1.8.ResetOperationNotAllowed", "system is already in the requested power state")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// apply changes a system's power under the lock; it returns the hook calls
// to make once the lock is released, whether the system was already in the
// requested state, and whether the reset type is supported.
func (s *Server) apply(sys *system, resetType string) (hooks []func(), unchanged, ok bool) {
	off := func() { _ = hookOff(sys.hook, sys.id) }
	on := func() { hookOn(sys.hook, sys.id) }
	switch resetType {
	case "ForceOff", "GracefulShutdown":
		switch {
		case sys.state == stateOff || sys.state == statePoweringOff:
			return nil, true, true
		case s.faults.staysOn:
			return nil, false, true
		}
		// PoweringOff until the hook is done: the BMC never reads Off
		// while the node behind it still runs.
		sys.state = statePoweringOff
		sys.gen++
		gen := sys.gen
		if s.faults.offDelay > 0 {
			sys.timer = time.AfterFunc(s.faults.offDelay, func() { s.delayedOff(sys, gen) })
			return nil, false, true
		}
		return []func(){func() { s.powerOff(sys, gen) }}, false, true
	case "On":
		if sys.state == stateOn {
			return nil, true, true
		}
		sys.stopTimer()
		sys.state = stateOn
		return []func(){on}, false, true
	case "ForceRestart":
		wasOn := sys.state != stateOff
		sys.stopTimer()
		sys.state = stateOn
		if wasOn {
			return []func(){off, on}, false, true
		}
		return []func(){on}, false, true
	}
	return nil, false, false
}

// delayedOff completes a delayed power-off unless the system was turned on
// or set meanwhile.
func (s *Server) delayedOff(sys *system, gen int) {
	s.mu.Lock()
	if sys.state != statePoweringOff || sys.gen != gen {
		s.mu.Unlock()
		return
	}
	sys.timer = nil
	s.mu.Unlock()
	s.powerOff(sys, gen)
}

// powerOff tells the hook, outside the lock, and only then makes the
// system read Off, unless its power changed meanwhile.
func (s *Server) powerOff(sys *system, gen int) {
	err := hookOff(sys.hook, sys.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sys.gen != gen || sys.state != statePoweringOff {
		return
	}
	if err != nil {
		sys.state = stateOn // the node did not stop: it must never read Off
		return
	}
	sys.state = stateOff
}

func hookOff(p Power, id string) error {
	if f, ok := p.(FailablePower); ok {
		return f.TryOff(id)
	}
	if p != nil {
		p.Off(id)
	}
	return nil
}

func hookOn(p Power, id string) {
	if p != nil {
		p.On(id)
	}
}
