package world

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ipmisim "fenceline.io/fenceline/test/bmc/ipmi"
	redfishsim "fenceline.io/fenceline/test/bmc/redfish"
)

// BMCKind is the protocol a node's simulated BMC speaks.
type BMCKind string

// The BMC kinds StartBMC serves.
const (
	// BMCRedfish is a Redfish BMC over HTTPS (test/bmc/redfish).
	BMCRedfish BMCKind = "Redfish"
	// BMCIPMI is an IPMI-over-LAN BMC over UDP (test/bmc/ipmi).
	BMCIPMI BMCKind = "IPMI"
)

// bmcHookTimeout bounds one power change the BMC makes to its node: the
// API calls of World.PowerOff, or the boot of World.PowerOn.
const bmcHookTimeout = 30 * time.Second

// BMC is the simulated baseboard management controller of one world node:
// what it powers off and on is the node itself, as World.PowerOff and
// World.PowerOn do. Close it when done.
type BMC struct {
	// Kind is the protocol the BMC speaks.
	Kind BMCKind
	// Node is the world node the BMC powers.
	Node string
	// Host and Port are the BMC's loopback address (TCP for Redfish, UDP
	// for IPMI).
	Host string
	Port int
	// Address is the BMC as a FenceTarget endpoint names it: an https URL
	// for Redfish, host:port for IPMI.
	Address string
	// Username and Password are the BMC's one account, generated.
	Username, Password string
	// SystemID is the Redfish ComputerSystem's ID; empty for IPMI.
	SystemID string
	// RootCAs trusts the Redfish BMC's self-signed certificate; nil for IPMI.
	RootCAs *x509.CertPool
	// SecretName is the credentials Secret in Namespace (bmc-<node>).
	SecretName string

	// Redfish and IPMI are the simulator itself (one of them is nil), for
	// faults and records beyond SetFaults and PowerCommands.
	Redfish *redfishsim.Server
	IPMI    *ipmisim.Simulator

	w        *World
	timeline *Timeline
	rail     *nodeRail
	once     sync.Once
	// readsOff is the ReadsOff last set by SetFaults.
	readsOff atomic.Bool
}

// BMCOption configures StartBMC.
type BMCOption func(*BMC)

// WithTimeline records the BMC's power events in tl: the power cut and
// the boot it makes, and what a Device built by BMC.Device sends and reads.
func WithTimeline(tl *Timeline) BMCOption { return func(b *BMC) { b.timeline = tl } }

// WithSecretName names the BMC's credentials Secret instead of
// bmc-<node>: a second BMC of the same node (another fence device, such as
// a level-2 IPMI next to a level-1 Redfish) needs its own Secret, or its
// credentials would replace those of the first.
func WithSecretName(name string) BMCOption { return func(b *BMC) { b.SecretName = name } }

// StartBMC starts a simulated BMC of kind for node on 127.0.0.1, with
// generated credentials, and creates the credentials Secret
// (Namespace/bmc-<node> unless WithSecretName, type basic-auth). A node may
// have several BMCs: each cuts and restores the same node power, but reads
// back only the changes it made itself. The BMC's power-off is
// World.PowerOff (the node stops heartbeating and, unless the world runs
// with ZombieWrites, writing) and is done before the BMC reads Off; its
// power-on is World.PowerOn (a boot with a new boot ID), started in the
// background as a real boot is, so the BMC reads On at once. The BMC
// starts reading the node's power as it is (Off after World.PowerOff).
// The caller must Close the BMC.
func (w *World) StartBMC(ctx context.Context, node string, kind BMCKind, opts ...BMCOption) (*BMC, error) {
	powered, ok := w.nodePowered(node)
	if !ok {
		return nil, fmt.Errorf("starting a BMC: %q is not a node of this world", node)
	}
	user, err := randomHex("bmc-", 4)
	if err != nil {
		return nil, err
	}
	password, err := randomHex("", 8)
	if err != nil {
		return nil, err
	}
	b := &BMC{Kind: kind, Node: node, Username: user, Password: password, SecretName: "bmc-" + node, w: w}
	for _, o := range opts {
		o(b)
	}
	b.rail = &nodeRail{b: b}
	b.rail.down.Store(!powered)
	switch kind {
	case BMCRedfish:
		b.startRedfish()
	case BMCIPMI:
		if err := b.startIPMI(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("starting a BMC: unknown kind %q", kind)
	}
	if err := b.createSecret(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *BMC) startRedfish() {
	b.SystemID = b.Node
	b.Redfish = redfishsim.New(redfishsim.Options{
		Username: b.Username, Password: b.Password,
		Systems: []redfishsim.System{{ID: b.SystemID, Off: !b.powered(), Power: redfishHook{b.rail}}},
	})
	b.Address = b.Redfish.URL()
	b.RootCAs = b.Redfish.CertPool()
	host, port, _ := net.SplitHostPort(b.Redfish.Address())
	b.Host = host
	b.Port, _ = strconv.Atoi(port)
}

func (b *BMC) startIPMI() error {
	sim, err := ipmisim.Start(ipmisim.Config{
		Username: b.Username, Password: b.Password, Off: !b.powered(),
		Power: ipmisim.PowerFuncs{Off: b.rail.off, On: b.rail.on},
	})
	if err != nil {
		return fmt.Errorf("starting the IPMI BMC of %s: %w", b.Node, err)
	}
	b.IPMI = sim
	b.Host, b.Port, b.Address = sim.Host(), sim.Port(), sim.String()
	return nil
}

// Close stops the BMC and waits for a boot it started. The Secret stays.
func (b *BMC) Close() {
	b.once.Do(func() {
		if b.Redfish != nil {
			b.Redfish.Close()
		}
		if b.IPMI != nil {
			_ = b.IPMI.Close()
		}
		b.rail.boots.Wait()
	})
}

// PoweredOn reports the power state the BMC reads.
func (b *BMC) PoweredOn() bool {
	if b.Redfish != nil {
		return b.Redfish.PowerState(b.SystemID) == "On"
	}
	return b.IPMI.PoweredOn()
}

// ReadsOff reports whether the BMC reads Off (not PoweringOff nor On).
func (b *BMC) ReadsOff() bool {
	if b.Redfish != nil {
		return b.Redfish.PowerState(b.SystemID) == "Off"
	}
	return !b.IPMI.PoweredOn()
}

// Errors returns the errors of the power changes the BMC made to its node
// (a failed World.PowerOff or PowerOn); a BMC cannot report them itself.
func (b *BMC) Errors() []error { return b.rail.errors() }

// event records a power event in the timeline, if any.
func (b *BMC) event(format string, args ...any) {
	if b.timeline != nil {
		b.timeline.Add(time.Now(), "BMC of %s (%s): "+format, append([]any{b.Node, b.Kind}, args...)...)
	}
}

// nodeRail is the world node's power as its BMC drives it. Power changes
// of one node are serialised: a power-off waits for a boot in progress.
type nodeRail struct {
	b     *BMC
	mu    sync.Mutex
	boots sync.WaitGroup
	// down is true from the end of a power-off to the next power-on.
	down atomic.Bool

	errMu sync.Mutex
	errs  []error
	log   []PowerChange
}

// PowerChange is one change the BMC made to its node's power.
type PowerChange struct {
	// Time is when the power was cut (after the node stopped) or when the
	// boot began.
	Time time.Time
	// On is true for a power-on, false for a power cut.
	On bool
}

func (r *nodeRail) record(on bool) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.log = append(r.log, PowerChange{Time: time.Now(), On: on})
}

// PowerLoss cuts the node's power as a power failure does, not through
// the BMC's API: the node stops, the BMC reads Off, and the cut is in the
// power log.
func (b *BMC) PowerLoss(ctx context.Context) error {
	if err := b.rail.off(ctx); err != nil {
		return err
	}
	b.setReads("Off")
	return nil
}

// PowerRestore brings the power back: the BMC reads On and the node boots
// (a new boot ID), as after PowerLoss or a fence.
func (b *BMC) PowerRestore(ctx context.Context) error {
	b.setReads("On")
	return b.rail.on(ctx)
}

func (b *BMC) setReads(state string) {
	if b.Redfish != nil {
		b.Redfish.SetPowerState(b.SystemID, state)
		return
	}
	b.IPMI.SetPoweredOn(state == "On")
}

// PowerLog returns the power changes the BMC made to its node, oldest
// first: the simulators' own record of what they did, for invariants such
// as "no node fenced that was healthy".
func (b *BMC) PowerLog() []PowerChange {
	b.rail.errMu.Lock()
	defer b.rail.errMu.Unlock()
	return append([]PowerChange(nil), b.rail.log...)
}

// off cuts the node's power and returns once it is off; the simulators
// read Off only after it returns.
func (r *nodeRail) off(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.b.w.PowerOff(ctx, r.b.Node); err != nil {
		err = fmt.Errorf("BMC power-off of %s: %w", r.b.Node, err)
		r.fail(err)
		return err
	}
	r.down.Store(true)
	r.record(false)
	r.b.event("power cut: heartbeats stopped")
	return nil
}

// on starts the node's boot (a new boot ID, then Ready) and returns.
func (r *nodeRail) on(ctx context.Context) error {
	r.down.Store(false)
	r.record(true)
	r.b.event("power on: booting")
	r.boots.Go(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bmcHookTimeout)
		defer cancel()
		if err := r.b.w.PowerOn(bctx, r.b.Node); err != nil {
			r.fail(fmt.Errorf("BMC power-on of %s: %w", r.b.Node, err))
			return
		}
		r.b.event("node booted with a new boot ID and Ready")
	})
	return nil
}

func (r *nodeRail) fail(err error) {
	r.b.event("power change failed: %v", err)
	r.errMu.Lock()
	defer r.errMu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *nodeRail) errors() []error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return append([]error(nil), r.errs...)
}

// redfishHook adapts the rail to the Redfish simulator's Power, which
// has neither a context nor an error.
type redfishHook struct{ r *nodeRail }

// Off cuts the node's power.
func (h redfishHook) Off(id string) { _ = h.TryOff(id) }

// TryOff cuts the node's power; on failure (recorded in Errors too) the
// simulated BMC keeps reading On, as the IPMI one does.
func (h redfishHook) TryOff(string) error {
	ctx, cancel := context.WithTimeout(context.Background(), bmcHookTimeout)
	defer cancel()
	return h.r.off(ctx)
}

// On boots the node.
func (h redfishHook) On(string) { _ = h.r.on(context.Background()) }

// randomHex returns prefix followed by n random bytes in hex.
func randomHex(prefix string, n int) (string, error) {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("generating BMC credentials: %w", err)
	}
	return prefix + hex.EncodeToString(buf), nil
}

// errNoServerError is SetFaults' answer to ServerError on an IPMI BMC.
var errNoServerError = errors.New("an IPMI BMC has no HTTP status to fail with")

// BMCFaults are the misbehaviours SetFaults switches; the zero value is an
// honest BMC.
type BMCFaults struct {
	// Latency delays every answer.
	Latency time.Duration
	// RejectAuth makes the BMC refuse the credentials.
	RejectAuth bool
	// StaysOn accepts a power-off and leaves the node on: the lying BMC.
	StaysOn bool
	// OffDelay cuts the power that long after the power-off is accepted.
	OffDelay time.Duration
	// Unreachable makes the BMC unreachable.
	Unreachable bool
	// ServerError, Redfish only, makes the Reset action answer this HTTP
	// status (such as 500) without acting.
	ServerError int
	// ReadsOff makes the BMC read Off whatever the power is (a stale or
	// broken power sensor); with StaysOn it is the worst liar, which
	// accepts a power-off, leaves the node running and reads Off.
	ReadsOff bool
}

// SetFaults replaces the faults in force.
func (b *BMC) SetFaults(f BMCFaults) error {
	if b.IPMI != nil {
		if f.ServerError != 0 {
			return errNoServerError
		}
		return b.IPMI.SetFaults(ipmisim.Faults{
			Latency: f.Latency, RejectAuth: f.RejectAuth, IgnorePowerDown: f.StaysOn,
			PowerDownDelay: f.OffDelay, Unreachable: f.Unreachable, ReadsOff: f.ReadsOff,
		})
	}
	s := b.Redfish
	// Stale reads set directly on the simulator are left alone unless
	// ReadsOff set them.
	if f.ReadsOff {
		s.SetStaleReads("Off", math.MaxInt)
	} else if b.readsOff.Load() {
		s.SetStaleReads("", 0)
	}
	b.readsOff.Store(f.ReadsOff)
	s.SetLatency(f.Latency)
	auth := 0
	if f.RejectAuth {
		auth = 401
	}
	s.SetAuthFailure(auth)
	s.SetStaysOn(f.StaysOn)
	s.SetOffDelay(f.OffDelay)
	s.SetFailure(redfishsim.EndpointReset, redfishsim.Failure{Status: f.ServerError})
	if err := s.SetUnreachable(f.Unreachable); err != nil {
		return fmt.Errorf("setting the BMC of %s unreachable=%v: %w", b.Node, f.Unreachable, err)
	}
	return nil
}

// PowerCommand is one power action the BMC received.
type PowerCommand struct {
	// Action is the Redfish ResetType ("ForceOff", "On") or the IPMI
	// Chassis Control action ("power down", "power up").
	Action string
	// OK is whether the BMC accepted it (HTTP 2xx, completion code 0).
	OK bool
}

// PowerCommands returns the power actions the BMC received, oldest first.
func (b *BMC) PowerCommands() []PowerCommand {
	var out []PowerCommand
	if b.IPMI != nil {
		for _, c := range b.IPMI.Commands() {
			if c.Action != "" {
				out = append(out, PowerCommand{Action: c.Action, OK: c.CompletionCode == 0})
			}
		}
		return out
	}
	for _, r := range b.Redfish.Requests() {
		if r.ResetType != "" {
			out = append(out, PowerCommand{Action: r.ResetType, OK: r.Status/100 == 2})
		}
	}
	return out
}

// powered reports whether the BMC's node is powered on.
func (b *BMC) powered() bool {
	on, _ := b.w.nodePowered(b.Node)
	return on
}
