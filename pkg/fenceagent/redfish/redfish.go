// Package redfish is the Redfish power fence method: a power.Device for one
// ComputerSystem of a BMC, built on gofish. Status reads PowerState back,
// Off sends ComputerSystem.Reset (ForceOff by default) and On sends On.
// The method never decides that a node is off: power.PowerOff does, from a
// read-back Off.
//
// Each call opens a session, does its few requests and deletes the session,
// even when the call's context is done, so a verify loop leaves no session
// behind on the BMC. A BMC without a SessionService falls back to basic
// auth. Errors wrap ErrAuth when the BMC rejects the credentials and
// ErrUnreachable when it does not answer, and never carry a credential.
package redfish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// systemsURI is the Systems collection, at a fixed URI since Redfish 1.6.
const systemsURI = "/redfish/v1/Systems"

// Device is the fence device of one Redfish system. It is safe for
// concurrent use.
type Device struct {
	cfg      Config
	endpoint string
	client   *http.Client

	mu        sync.Mutex
	systemURI string // resolved once, then reused
	basicAuth bool   // the BMC has no usable SessionService
}

var _ power.Device = (*Device)(nil)

// New checks cfg and returns its device; it does not contact the BMC.
func New(cfg Config) (*Device, error) {
	ep, err := cfg.endpoint()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Device{cfg: cfg, endpoint: ep, client: cfg.httpClient(), basicAuth: cfg.BasicAuth}, nil
}

// Status reads the system's PowerState: On and Off map to power.StateOn
// and power.StateOff, anything else (PoweringOn, PoweringOff, Paused, an
// empty or vendor value) to power.StateUnknown.
func (d *Device) Status(ctx context.Context) (power.State, error) {
	state := power.StateUnknown
	err := d.do(ctx, "status", func(_ logr.Logger, sys *schemas.ComputerSystem) error {
		state = mapState(sys.PowerState)
		return nil
	})
	if err != nil {
		return power.StateUnknown, err
	}
	return state, nil
}

// Off sends the configured reset type (ForceOff by default), also to a
// system that already reads Off (see sendReset), and takes a refusal
// because it is already off for success. nil means the BMC accepted, not
// that the node is off.
func (d *Device) Off(ctx context.Context) error {
	return d.do(ctx, "off", func(log logr.Logger, sys *schemas.ComputerSystem) error {
		return reset(log, sys, schemas.ResetType(d.cfg.ResetType), schemas.OffPowerState)
	})
}

// On sends ComputerSystem.Reset with ResetType On.
func (d *Device) On(ctx context.Context) error {
	return d.do(ctx, "on", func(log logr.Logger, sys *schemas.ComputerSystem) error {
		return reset(log, sys, schemas.OnResetType, schemas.OnPowerState)
	})
}

func mapState(s schemas.PowerState) power.State {
	switch s {
	case schemas.OnPowerState:
		return power.StateOn
	case schemas.OffPowerState:
		return power.StateOff
	}
	return power.StateUnknown
}

// do runs fn on the system within one session and the call's timeout.
func (d *Device) do(ctx context.Context, op string, fn func(logr.Logger, *schemas.ComputerSystem) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	log := klog.FromContext(ctx).WithValues("bmc", d.endpoint, "op", op)
	c, err := d.connectOrLeave(ctx, log)
	if err != nil {
		return d.fail(op, "connect", err)
	}
	defer d.logout(ctx, c, log)
	sys, err := d.system(c)
	if err != nil {
		return d.fail(op, "read system", err)
	}
	log.V(4).Info("Redfish system read", "system", sys.ODataID, "powerState", sys.PowerState)
	if err := fn(log.WithValues("system", sys.ODataID), sys); err != nil {
		return d.fail(op, "reset", err)
	}
	return nil
}

func (d *Device) fail(op, stage string, err error) error {
	sys := d.cfg.SystemID
	if sys == "" {
		sys = "(the only system)"
	}
	wrapped := fmt.Errorf("redfish %s of system %s at %s: %s: %w", op, sys, d.endpoint, stage, classify(err))
	return redact(wrapped, d.cfg.secrets()...)
}

// connect reads the service root and opens a session, or falls back to
// basic auth for good when the BMC has no session service.
func (d *Device) connect(ctx context.Context, log logr.Logger) (*gofish.APIClient, error) {
	d.mu.Lock()
	basic := d.basicAuth
	d.mu.Unlock()
	cfg := gofish.ClientConfig{
		Endpoint: d.endpoint, Username: d.cfg.Username, Password: d.cfg.Password,
		HTTPClient: d.client, NoModifyTransport: true, ReuseConnections: true, BasicAuth: basic,
	}
	c, err := gofish.ConnectContext(ctx, cfg)
	if err == nil || basic || !sessionUnsupported(err) {
		return c, err
	}
	log.V(2).Info("Redfish BMC cannot open a session, using basic auth from now on", "status", statusOf(err))
	d.mu.Lock()
	d.basicAuth = true
	d.mu.Unlock()
	cfg.BasicAuth = true
	return gofish.ConnectContext(ctx, cfg)
}

// connectOrLeave is connect that returns as soon as ctx ends, without
// leaking a session: a connect cut short after the BMC opened the session
// would leave one nobody can name, and BMCs have few. So the connect runs
// on (bounded by the call's timeout) after the caller has gone, and the
// session it opened then is deleted. The client returned uses ctx.
func (d *Device) connectOrLeave(ctx context.Context, log logr.Logger) (*gofish.APIClient, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type connected struct {
		c   *gofish.APIClient
		err error
	}
	done := make(chan connected, 1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
	go func() {
		defer cancel()
		c, err := d.connect(cctx, log)
		done <- connected{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return r.c.WithContext(ctx), nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				d.logout(ctx, r.c, log)
			}
		}()
		return nil, ctx.Err()
	}
}

// sessionUnsupported tells a BMC without a SessionService (no Sessions
// link, 404, 405, 501) from a refusal or an outage.
func sessionUnsupported(err error) bool {
	switch statusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	case 0:
		return !errors.Is(classify(err), ErrUnreachable) && !errors.Is(err, context.Canceled) && !errors.Is(classify(err), ErrTLS)
	}
	return false
}

// logout deletes the call's session with a context of its own, so a
// cancelled or timed-out call still frees its session on the BMC.
func (d *Device) logout(ctx context.Context, c *gofish.APIClient, log logr.Logger) {
	defer d.client.CloseIdleConnections()
	sess, err := c.GetSession()
	if err != nil {
		return // basic auth: no session
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logoutTimeout)
	defer cancel()
	if err := schemas.DeleteSession(c.WithContext(lctx), sess.ID); err != nil {
		log.V(2).Info("Redfish session not deleted; the BMC expires it", "session", sess.ID, "err", redact(classify(err), d.cfg.secrets()...))
	}
}

// system reads the ComputerSystem, resolving its URI on first use.
func (d *Device) system(c *gofish.APIClient) (*schemas.ComputerSystem, error) {
	d.mu.Lock()
	uri := d.systemURI
	d.mu.Unlock()
	if uri == "" {
		var err error
		if uri, err = d.resolve(c); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.systemURI = uri
		d.mu.Unlock()
	}
	return schemas.GetComputerSystem(c, uri)
}

// resolve finds the system's URI: SystemID as a URI, the member whose Id
// is SystemID, or the one member when SystemID is empty.
func (d *Device) resolve(c *gofish.APIClient) (string, error) {
	id := d.cfg.SystemID
	if strings.HasPrefix(id, "/") {
		return id, nil
	}
	col, err := schemas.GetCollection(c, systemsURI)
	if err != nil {
		return "", err
	}
	ids := make([]string, 0, len(col.ItemLinks))
	for _, link := range col.ItemLinks {
		member := path.Base(strings.TrimSuffix(link, "/"))
		if id != "" && member == id {
			return link, nil
		}
		ids = append(ids, member)
	}
	switch {
	case id != "":
		return "", fmt.Errorf("%w: no system %q, the BMC has %q", ErrSystemNotFound, id, ids)
	case len(ids) == 0:
		return "", fmt.Errorf("%w: the BMC lists no system", ErrSystemNotFound)
	case len(ids) > 1:
		return "", fmt.Errorf("%w: the BMC has %d systems %q; set systemID", ErrAmbiguousSystem, len(ids), ids)
	}
	return col.ItemLinks[0], nil
}

// reset sends rt when sendReset says so. A refusal (400 or 409) is
// success when a fresh read shows the system already in want: vendors
// answer "already off" that way.
func reset(log logr.Logger, sys *schemas.ComputerSystem, rt schemas.ResetType, want schemas.PowerState) error {
	if send, why := sendReset(rt, sys.PowerState, want); !send {
		log.V(2).Info("Redfish reset not sent", "resetType", rt, "powerState", sys.PowerState, "why", why)
		return nil
	}
	_, err := sys.Reset(rt)
	if err == nil {
		log.V(2).Info("Redfish reset accepted", "resetType", rt, "powerState", sys.PowerState)
		return nil
	}
	if st := statusOf(err); st == http.StatusConflict || st == http.StatusBadRequest {
		again, gerr := schemas.GetComputerSystem(sys.GetClient(), sys.ODataID)
		if gerr == nil && again.PowerState == want {
			log.V(2).Info("Redfish reset refused, the system is already in the requested state", "resetType", rt, "status", st)
			return nil
		}
	}
	return err
}

// sendReset decides whether a reset of type rt goes to a system that reads
// current, to bring it to want, and says why when it does not.
//
// A power-off is sent whatever the system reads: a BMC whose power reading
// is stale or wrong reads Off while the node runs, and only the command
// stops it; ForceOff to a system that is off changes nothing. The one
// exception is a power button: a press toggles, so pressing it on a system
// that reads Off or PoweringOff could power the node on. A power-on is not
// a fence and is skipped when the system already reads On.
func sendReset(rt schemas.ResetType, current, want schemas.PowerState) (bool, string) {
	switch {
	case want != schemas.OffPowerState:
		if current == want {
			return false, "the system already reads " + string(want)
		}
		return true, ""
	case rt == schemas.PushPowerButtonResetType && (current == schemas.OffPowerState || current == schemas.PoweringOffPowerState):
		return false, "a button press on a system that reads " + string(current) + " could power it on"
	}
	return true, ""
}
