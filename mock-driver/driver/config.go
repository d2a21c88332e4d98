package driver

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/mock-driver/tgt"
)

// DefaultName is the mock driver's CSI driver name.
const DefaultName = "mock.fenceline.io"

// Config configures a mock driver. Build it with DefaultConfig and change
// what the test needs: the zero value has fencing switched off.
type Config struct {
	// Name is the CSI driver name (DefaultName).
	Name string
	// Version is reported by GetPluginInfo.
	Version string
	// StateDir holds state.json and audit.jsonl; created if missing.
	StateDir string
	// MemoryState keeps the array's state in memory only, never in
	// state.json: a restarted driver starts empty. Saving the whole state
	// on every change costs 200 ms at 50,000 volumes, so runs of tens of
	// thousands of volumes (the attacher's scale benchmark) need it.
	MemoryState bool
	// Endpoint serves Identity and Controller, and Node for NodeID when
	// set: "unix:///path/csi.sock", a bare path, or "tcp://host:port".
	Endpoint string
	// NodeID is the node identity of Endpoint; empty serves no Node
	// service there.
	NodeID string
	// NodeEndpoints serves Identity and Node for further nodes from the
	// same array: node ID -> endpoint.
	NodeEndpoints map[string]string
	// Fence advertises and honours UNPUBLISH_FENCE.
	Fence bool
	// FakeFence advertises UNPUBLISH_FENCE without honouring it (fence=true
	// is a plain unpublish): a lying driver, for testing conformance
	// checks. Fence must be false.
	FakeFence bool
	// ForceUnpublish advertises and honours FORCE_UNPUBLISH.
	ForceUnpublish bool
	// ListFences advertises and serves LIST_FENCES on the controller
	// endpoint: the fences the array holds.
	ListFences bool
	// LiftFence advertises and serves LIFT_FENCE on the controller
	// endpoint. It needs ListFences, as the extension's contract does.
	LiftFence bool
	// Unpublish is what a plain ControllerUnpublishVolume of a volume the
	// node still has staged or published does: array.UnpublishStrict (the
	// default, also when empty) refuses it, array.UnpublishRealArray does it
	// and leaves the node write access, as real arrays do (the failure
	// fencing exists to prevent).
	Unpublish array.UnpublishMode
	// NoAttach serves a driver without an attach step (attachRequired:
	// false): no PUBLISH_UNPUBLISH_VOLUME, and nodes stage volumes that were
	// never published to them.
	NoAttach bool
	// MinimalController advertises only CREATE_DELETE_VOLUME and
	// PUBLISH_UNPUBLISH_VOLUME, and refuses ControllerPublishVolume with
	// readonly=true (see array.Semantics.MinimalController).
	MinimalController bool
	// MaxVolumesPerNode is reported by NodeGetInfo and enforced by the
	// array; zero means no limit.
	MaxVolumesPerNode int64
	// Capacity is the array size in bytes (1 TiB when zero).
	Capacity int64
	// Faults are the fault-injection rules in force at start.
	Faults []faults.Fault
	// HTTPEndpoint, when set (e.g. "127.0.0.1:0"), serves Prometheus
	// metrics at /metrics.
	HTTPEndpoint string
	// Backend is where volumes live: BackendMemory (also when empty) keeps
	// only the array's bookkeeping; BackendTgt also serves each volume as
	// an iSCSI LUN on a tgtd the driver starts (see package tgt).
	Backend string
	// FenceMethod is how the tgt backend fences (tgt.MethodACLSessions
	// when empty); only for BackendTgt.
	FenceMethod string
	// CSIAddonsEndpoint, when set, serves the csi-addons Identity and
	// FenceController services (network fencing by CIDR block) on a socket
	// of its own, as ceph-csi does: "unix:///path", a bare path or
	// "tcp://host:port". Empty serves no csi-addons.
	CSIAddonsEndpoint string
	// NodeAddresses are the client addresses each node's plugin reaches
	// the array from (node ID -> IPv4 or IPv6 addresses): at start-up the
	// node plugin registers them with the array, which then refuses the
	// node's access while one of them lies in a fenced CIDR block. A node
	// without addresses is never refused by a network fence. Every node
	// must be served (NodeID or NodeEndpoints).
	NodeAddresses map[string][]string
}

// The storage backends.
const (
	BackendMemory = "memory"
	BackendTgt    = "tgt"
)

// DefaultConfig returns the configuration the binary uses without flags:
// the default name, fencing, forced clean-up and listing and lifting fences
// on, strict unpublish, the memory backend.
func DefaultConfig() Config {
	return Config{
		Name: DefaultName, Version: "dev", Fence: true, ForceUnpublish: true, ListFences: true, LiftFence: true,
		Unpublish: array.UnpublishStrict, Backend: BackendMemory,
	}
}

// A CSI driver name: at most 63 characters, alphanumerics, '-', '.' and
// '_', starting and ending with an alphanumeric.
var driverName = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$`)

// Validate checks the configuration and returns every problem found.
func (c Config) Validate() error {
	var problems []string
	if !driverName.MatchString(c.Name) {
		problems = append(problems, fmt.Sprintf("name %q is not a valid CSI driver name", c.Name))
	}
	if c.StateDir == "" {
		problems = append(problems, "state directory is required")
	}
	if c.FakeFence && c.Fence {
		problems = append(problems, "fake fence needs fencing switched off (--fence=false)")
	}
	if c.LiftFence && !c.ListFences {
		problems = append(problems, "lifting fences needs listing them (--list-fences): a CO lifts what it was shown")
	}
	if c.Endpoint == "" {
		problems = append(problems, "endpoint is required")
	}
	if c.MaxVolumesPerNode < 0 {
		problems = append(problems, "max volumes per node must not be negative")
	}
	if _, err := array.ParseUnpublishMode(string(c.Unpublish)); err != nil {
		problems = append(problems, err.Error())
	}
	problems = append(problems, c.validateBackend()...)
	problems = append(problems, c.validateAddons()...)
	if c.MemoryState && c.Backend == BackendTgt {
		problems = append(problems, "the tgt backend needs the state on disk (no --memory-state): a restarted driver would forget the LUNs its target serves")
	}
	if c.Capacity < 0 {
		problems = append(problems, "capacity must not be negative")
	}
	seen := map[string]string{c.Endpoint: "the controller endpoint"}
	for node, ep := range c.NodeEndpoints {
		switch {
		case node == "":
			problems = append(problems, "node endpoint with an empty node ID")
		case node == c.NodeID:
			problems = append(problems, fmt.Sprintf("node %s is served twice (endpoint and node endpoint)", node))
		case ep == "":
			problems = append(problems, fmt.Sprintf("node %s has an empty endpoint", node))
		case seen[ep] != "" && !strings.HasSuffix(ep, ":0"): // port 0: each gets its own
			problems = append(problems, fmt.Sprintf("endpoint %s is used by node %s and %s", ep, node, seen[ep]))
		default:
			seen[ep] = "node " + node
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid mock driver configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

// validateAddons checks the csi-addons endpoint and the node addresses.
func (c Config) validateAddons() []string {
	var problems []string
	if c.CSIAddonsEndpoint != "" {
		if _, _, err := ParseEndpoint(c.CSIAddonsEndpoint); err != nil {
			problems = append(problems, "csi-addons "+err.Error())
		}
		if c.CSIAddonsEndpoint == c.Endpoint {
			problems = append(problems, "the csi-addons endpoint must differ from the CSI endpoint")
		}
		for node, ep := range c.NodeEndpoints {
			if ep == c.CSIAddonsEndpoint {
				problems = append(problems, fmt.Sprintf("the csi-addons endpoint is also node %s's endpoint", node))
			}
		}
	}
	for _, node := range slices.Sorted(maps.Keys(c.NodeAddresses)) {
		if _, served := c.NodeEndpoints[node]; !served && (node == "" || node != c.NodeID) {
			problems = append(problems, fmt.Sprintf("node address for node %q, which the driver does not serve", node))
			continue
		}
		if _, err := c.nodeAddrs(node); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

// nodeAddrs parses the addresses of node.
func (c Config) nodeAddrs(node string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range c.NodeAddresses[node] {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("node %s: address %q: %v", node, s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// validateBackend checks the backend, its fence method and, for tgt, that
// every node ID served maps to an initiator name.
func (c Config) validateBackend() []string {
	switch c.Backend {
	case "", BackendMemory:
		if c.FenceMethod != "" {
			return []string{fmt.Sprintf("fence method %q needs the tgt backend", c.FenceMethod)}
		}
		return nil
	case BackendTgt:
	default:
		return []string{fmt.Sprintf("unknown backend %q: want %q or %q", c.Backend, BackendMemory, BackendTgt)}
	}
	var problems []string
	if _, err := tgt.ParseFenceMethod(c.FenceMethod); err != nil {
		problems = append(problems, err.Error())
	}
	if c.NoAttach {
		problems = append(problems, "the tgt backend grants access at ControllerPublishVolume, which a driver without an attach step never gets")
	}
	nodes := slices.Sorted(maps.Keys(c.NodeEndpoints))
	if c.NodeID != "" {
		nodes = append(nodes, c.NodeID)
	}
	for _, n := range nodes {
		if _, err := tgt.InitiatorName(n); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}
