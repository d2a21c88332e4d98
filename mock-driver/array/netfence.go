package array

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Network fencing is the other way a storage system cuts a node off: not
// per volume, at the unpublish, but per client address, as csi-addons'
// FenceClusterNetwork asks (Ceph's OSD blocklist). The array keeps the
// fenced CIDR blocks in its state, so they survive a restart, and refuses
// every access of a node whose client address lies in one of them.
//
// The array learns a node's address the way a real one does: from the
// client's session, which the node plugin opens at start-up
// (RegisterClient). A node whose plugin registered no address is unknown
// to the network fences and never refused by them; per-volume fences still
// apply to it. Sessions are not persisted: the node plugins register again
// whenever the driver starts.

// NetworkFence is one fenced CIDR block.
type NetworkFence struct {
	// CIDR is the block, in canonical form (host bits cleared).
	CIDR netip.Prefix
	// Since is when the block was first fenced.
	Since time.Time
}

// ParseCIDRs parses the CIDR blocks of a fence or unfence request into
// their canonical form ("10.1.2.3/24" is 10.1.2.0/24), without
// duplicates, in the order given. An empty list or a block that does not
// parse is InvalidArgument. A bare address without a prefix length is not
// a block and is refused too.
func ParseCIDRs(cidrs []string) ([]netip.Prefix, error) {
	if len(cidrs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "cidrs: at least one CIDR block is required")
	}
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "cidrs[%d]: %q is not a CIDR block: %v", i, c, err)
		}
		if p = p.Masked(); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// RegisterClient records the addresses node's plugin reaches the array
// from, replacing what it registered before; no addresses forgets the
// node's session. The node must be one the array serves.
func (a *Array) RegisterClient(node string, addrs []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.nodes[node] {
		return status.Errorf(codes.NotFound, "node %s is not known to the array", node)
	}
	if len(addrs) == 0 {
		delete(a.clients, node)
		return nil
	}
	clean := make([]netip.Addr, 0, len(addrs))
	for _, ad := range addrs {
		if !ad.IsValid() {
			return status.Errorf(codes.InvalidArgument, "node %s: invalid client address", node)
		}
		if ad = ad.Unmap().WithZone(""); !slices.Contains(clean, ad) {
			clean = append(clean, ad)
		}
	}
	if a.clients == nil {
		a.clients = map[string][]netip.Addr{}
	}
	a.clients[node] = clean
	return nil
}

// Clients returns every node's registered client addresses.
func (a *Array) Clients() map[string][]netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]netip.Addr, len(a.clients))
	for n, addrs := range a.clients {
		out[n] = slices.Clone(addrs)
	}
	return out
}

// FenceNetworks fences the CIDR blocks (see ParseCIDRs). Fencing a block
// already fenced is a success that keeps its first time.
func (a *Array) FenceNetworks(cidrs []string) error {
	blocks, err := ParseCIDRs(cidrs)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var add []string
	for _, p := range blocks {
		if _, ok := a.state.NetworkFences[p.String()]; !ok {
			add = append(add, p.String())
		}
	}
	if len(add) == 0 {
		return nil
	}
	now := a.opts.Now()
	return a.update(func(s *State) {
		if s.NetworkFences == nil {
			s.NetworkFences = map[string]time.Time{}
		}
		for _, c := range add {
			s.NetworkFences[c] = now
		}
	})
}

// UnfenceNetworks lifts the fences of exactly the CIDR blocks given (in
// canonical form): a block inside or around a fenced one lifts nothing. A
// block not fenced is a success.
func (a *Array) UnfenceNetworks(cidrs []string) error {
	blocks, err := ParseCIDRs(cidrs)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var lift []string
	for _, p := range blocks {
		if _, ok := a.state.NetworkFences[p.String()]; ok {
			lift = append(lift, p.String())
		}
	}
	if len(lift) == 0 {
		return nil
	}
	return a.update(func(s *State) {
		for _, c := range lift {
			delete(s.NetworkFences, c)
		}
	})
}

// NetworkFences returns the fenced blocks, IPv4 before IPv6, by address
// and then by prefix length.
func (a *Array) NetworkFences() []NetworkFence {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]NetworkFence, 0, len(a.state.NetworkFences))
	for _, c := range slices.Sorted(maps.Keys(a.state.NetworkFences)) {
		out = append(out, NetworkFence{CIDR: netip.MustParsePrefix(c), Since: a.state.NetworkFences[c]})
	}
	slices.SortFunc(out, func(x, y NetworkFence) int {
		return cmp.Or(x.CIDR.Addr().Compare(y.CIDR.Addr()), cmp.Compare(x.CIDR.Bits(), y.CIDR.Bits()))
	})
	return out
}

// checkNetworkAccess refuses, with code, any access of node while one of
// its registered addresses lies in a fenced block. The caller holds a.mu.
// Without network fences, or for a node that registered no address, it
// refuses nothing.
func (a *Array) checkNetworkAccess(node string, code codes.Code) error {
	if len(a.state.NetworkFences) == 0 {
		return nil
	}
	if c, addr, ok := fencedBlock(a.state.NetworkFences, a.clients[node]); ok {
		return status.Errorf(code, "node %s (client address %s) is in the fenced network %s; the array refuses its access", node, addr, c)
	}
	return nil
}

// fencedBlock returns the first fenced block (in sorted order) holding one
// of addrs, and that address.
func fencedBlock(fences map[string]time.Time, addrs []netip.Addr) (string, netip.Addr, bool) {
	if len(addrs) == 0 {
		return "", netip.Addr{}, false
	}
	for _, c := range slices.Sorted(maps.Keys(fences)) {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			// State.Validate keeps such keys out; never match one.
			continue
		}
		for _, ad := range addrs {
			if p.Contains(ad) {
				return c, ad, true
			}
		}
	}
	return "", netip.Addr{}, false
}

// String renders a fence for logs.
func (f NetworkFence) String() string {
	return fmt.Sprintf("%s since %s", f.CIDR, f.Since.UTC().Format(time.RFC3339))
}
