package array

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/persist"
)

func TestParseCIDRs(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{name: "IPv4 host", in: []string{"10.0.0.7/32"}, want: []string{"10.0.0.7/32"}},
		{name: "host bits cleared", in: []string{"10.0.0.7/24"}, want: []string{"10.0.0.0/24"}},
		{name: "IPv6", in: []string{"fd00::7/128", "FD00:0:0:1::9/64"}, want: []string{"fd00::7/128", "fd00:0:0:1::/64"}},
		{name: "duplicates once", in: []string{"10.0.0.7/32", "10.0.0.7/32", "10.0.0.1/24", "10.0.0.0/24"}, want: []string{"10.0.0.7/32", "10.0.0.0/24"}},
		{name: "empty list", in: nil, wantErr: "at least one CIDR"},
		{name: "bare address", in: []string{"10.0.0.7"}, wantErr: `cidrs[0]: "10.0.0.7" is not a CIDR block`},
		{name: "garbage among good", in: []string{"10.0.0.7/32", "node-a"}, wantErr: `cidrs[1]: "node-a"`},
		{name: "prefix too long", in: []string{"10.0.0.7/33"}, wantErr: "is not a CIDR block"},
		{name: "empty string", in: []string{""}, wantErr: "is not a CIDR block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCIDRs(tc.in)
			if tc.wantErr != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want InvalidArgument containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if !reflect.DeepEqual(s, tc.want) {
				t.Fatalf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func TestFencedBlock(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	tests := []struct {
		name   string
		fences []string
		addrs  []netip.Addr
		want   string // the block that refuses, "" for none
	}{
		{name: "IPv4 /32 of the node", fences: []string{"10.0.0.7/32"}, addrs: addrs("10.0.0.7"), want: "10.0.0.7/32"},
		{name: "IPv4 /32 of another node", fences: []string{"10.0.0.8/32"}, addrs: addrs("10.0.0.7")},
		{name: "IPv4 /24 around the node", fences: []string{"10.0.0.0/24"}, addrs: addrs("10.0.0.7"), want: "10.0.0.0/24"},
		{name: "IPv4 /24 next door", fences: []string{"10.0.1.0/24"}, addrs: addrs("10.0.0.7")},
		{name: "IPv4 /0 fences every IPv4 client", fences: []string{"0.0.0.0/0"}, addrs: addrs("192.168.1.1"), want: "0.0.0.0/0"},
		{name: "IPv6 /128 of the node", fences: []string{"fd00::7/128"}, addrs: addrs("fd00::7"), want: "fd00::7/128"},
		{name: "IPv6 /64 around the node", fences: []string{"fd00:0:0:1::/64"}, addrs: addrs("fd00:0:0:1:5::42"), want: "fd00:0:0:1::/64"},
		{name: "IPv6 /64 next door", fences: []string{"fd00:0:0:2::/64"}, addrs: addrs("fd00:0:0:1::42")},
		{name: "IPv4 block does not hold an IPv6 address", fences: []string{"0.0.0.0/0"}, addrs: addrs("fd00::7")},
		{name: "IPv6 block does not hold an IPv4 address", fences: []string{"::/0"}, addrs: addrs("10.0.0.7")},
		{name: "dual-stack node, its IPv6 address fenced", fences: []string{"fd00::7/128"}, addrs: addrs("10.0.0.7", "fd00::7"), want: "fd00::7/128"},
		{name: "node without a known address", fences: []string{"0.0.0.0/0", "::/0"}},
		{name: "no fences", addrs: addrs("10.0.0.7")},
		{name: "first block in order", fences: []string{"10.0.0.7/32", "10.0.0.0/8"}, addrs: addrs("10.0.0.7"), want: "10.0.0.0/8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]time.Time{}
			for _, f := range tc.fences {
				m[f] = t0
			}
			got, _, ok := fencedBlock(m, tc.addrs)
			if ok != (tc.want != "") || got != tc.want {
				t.Fatalf("fenced by %q (%t), want %q", got, ok, tc.want)
			}
		})
	}
}

// netArray is an array with nodes a and b, a at 10.0.0.1 and fd00::1,
// b at 10.0.1.2, node c without an address, and one RWX volume attached to
// and staged on every node.
func netArray(t *testing.T, store *persist.Store) (*Array, string) {
	t.Helper()
	a, err := New(Options{Store: store, Nodes: []string{"a", "b", "c"}, Semantics: Semantics{Fence: true, ForceUnpublish: true}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	register(t, a)
	v, err := a.CreateVolume("pvc-1", 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := a.Publish(v.ID, n, rwx, false); err != nil {
			t.Fatal(err)
		}
		if err := a.NodeStage(n, v.ID, "/s/"+n, rwx, noIO); err != nil {
			t.Fatal(err)
		}
	}
	return a, v.ID
}

func register(t *testing.T, a *Array) {
	t.Helper()
	for n, addrs := range map[string][]netip.Addr{
		"a": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
		"b": {netip.MustParseAddr("10.0.1.2")},
	} {
		if err := a.RegisterClient(n, addrs); err != nil {
			t.Fatal(err)
		}
	}
}

func noIO() error { return nil }

func TestNetworkFenceRefusals(t *testing.T) {
	tests := []struct {
		name    string
		fence   []string
		refused []string // nodes refused; the others keep access
		block   string   // the block named in a's refusal
	}{
		{name: "no fence", refused: nil},
		{name: "IPv4 /32 of node a", fence: []string{"10.0.0.1/32"}, refused: []string{"a"}, block: "10.0.0.1/32"},
		{name: "IPv6 /128 of node a", fence: []string{"fd00::1/128"}, refused: []string{"a"}, block: "fd00::1/128"},
		{name: "IPv4 /16 holding a and b", fence: []string{"10.0.0.0/16"}, refused: []string{"a", "b"}, block: "10.0.0.0/16"},
		{name: "a block holding nobody", fence: []string{"192.168.0.0/16", "fd01::/16"}},
		{name: "everything: node c has no known address", fence: []string{"0.0.0.0/0", "::/0"}, refused: []string{"a", "b"}, block: "0.0.0.0/0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, vol := netArray(t, nil)
			if len(tc.fence) > 0 {
				if err := a.FenceNetworks(tc.fence); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []string{"a", "b", "c"} {
				refused := false
				for _, r := range tc.refused {
					refused = refused || r == n
				}
				checks := map[string]struct {
					err  error
					code codes.Code
				}{
					"Write":                   {a.Write(n, vol), codes.PermissionDenied},
					"NodePublishVolume":       {a.NodePublish(n, vol, "/t/"+n, "/s/"+n, rwx, false, noIO), codes.FailedPrecondition},
					"NodeStageVolume":         {a.NodeStage(n, vol, "/s/"+n, rwx, noIO), codes.FailedPrecondition},
					"ControllerPublishVolume": {publishErr(a, vol, n), codes.FailedPrecondition},
				}
				for what, c := range checks {
					switch {
					case !refused && c.err != nil:
						t.Errorf("%s of node %s: %v, want success", what, n, c.err)
					case refused && status.Code(c.err) != c.code:
						t.Errorf("%s of node %s: %v, want %s", what, n, c.err, c.code)
					case refused && n == "a" && !strings.Contains(c.err.Error(), "fenced network "+tc.block):
						t.Errorf("%s of node a: %v, want the block %s named", what, c.err, tc.block)
					}
				}
			}
			// The clean-up of a fenced node is never refused: the node must
			// be able to let go.
			if err := a.NodeUnpublish("a", vol, "/t/a", false, noIO); err != nil {
				t.Errorf("NodeUnpublishVolume: %v", err)
			}
			if err := a.NodeUnstage("a", vol, "/s/a", false, func([]string) error { return nil }); err != nil {
				t.Errorf("NodeUnstageVolume: %v", err)
			}
		})
	}
}

func publishErr(a *Array, vol, node string) error {
	_, err := a.Publish(vol, node, rwx, false)
	return err
}

func TestNetworkFenceLifecycle(t *testing.T) {
	store := persist.New(filepath.Join(t.TempDir(), "state.json"))
	a, vol := netArray(t, store)
	mustFences := func(a *Array, want ...string) {
		t.Helper()
		var got []string
		for _, f := range a.NetworkFences() {
			got = append(got, f.CIDR.String())
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fences %v, want %v", got, want)
		}
	}
	if err := a.FenceNetworks([]string{"fd00::1/128", "10.0.0.1/32", "10.0.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	mustFences(a, "10.0.0.0/16", "10.0.0.1/32", "fd00::1/128")
	// Idempotent: fencing again changes nothing.
	if err := a.FenceNetworks([]string{"10.0.0.1/32"}); err != nil {
		t.Fatal(err)
	}
	mustFences(a, "10.0.0.0/16", "10.0.0.1/32", "fd00::1/128")
	// Invalid requests change nothing.
	for _, bad := range [][]string{nil, {"10.0.0.0/16", "x"}} {
		if err := a.UnfenceNetworks(bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("unfence %q: %v, want InvalidArgument", bad, err)
		}
		if err := a.FenceNetworks(bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("fence %q: %v, want InvalidArgument", bad, err)
		}
	}
	mustFences(a, "10.0.0.0/16", "10.0.0.1/32", "fd00::1/128")

	// A restart keeps the fences; the node plugins register again.
	b, err := New(Options{Store: store, Nodes: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	mustFences(b, "10.0.0.0/16", "10.0.0.1/32", "fd00::1/128")
	if got := b.NetworkFences()[0].Since; !got.Equal(t0) {
		t.Fatalf("fenced since %v after a restart, want %v", got, t0)
	}
	if err := b.Write("b", vol); err != nil {
		t.Fatalf("write of b before its plugin registered: %v (a node without a known address is not refused)", err)
	}
	register(t, b)
	if err := b.Write("b", vol); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("write of b after its plugin registered: %v, want PermissionDenied", err)
	}

	// Unfence lifts exactly the blocks given: a's /32 goes, the /16 stays.
	if err := b.UnfenceNetworks([]string{"10.0.0.1/32", "10.9.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	mustFences(b, "10.0.0.0/16", "fd00::1/128")
	if err := b.Write("a", vol); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("write of a under the /16: %v, want PermissionDenied", err)
	}
	// The same block with host bits set names the same fence.
	if err := b.UnfenceNetworks([]string{"10.0.5.5/16"}); err != nil {
		t.Fatal(err)
	}
	mustFences(b, "fd00::1/128")
	if err := b.Write("b", vol); err != nil {
		t.Fatalf("write of b after its block was lifted: %v", err)
	}
	if err := b.Write("a", vol); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("write of a with its IPv6 address still fenced: %v, want PermissionDenied", err)
	}
	if err := b.UnfenceNetworks([]string{"fd00::1/128"}); err != nil {
		t.Fatal(err)
	}
	if err := b.UnfenceNetworks([]string{"fd00::1/128"}); err != nil {
		t.Fatalf("repeated unfence: %v", err)
	}
	mustFences(b)
	if err := b.Write("a", vol); err != nil {
		t.Fatalf("write of a after every fence was lifted: %v", err)
	}
	c, err := New(Options{Store: store, Nodes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	mustFences(c)
}

func TestRegisterClient(t *testing.T) {
	a, err := New(Options{Nodes: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterClient("z", []netip.Addr{netip.MustParseAddr("10.0.0.1")}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown node: %v, want NotFound", err)
	}
	if err := a.RegisterClient("a", []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1%eth0")}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]netip.Addr{"a": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1")}}
	if got := a.Clients(); !reflect.DeepEqual(got, want) {
		t.Fatalf("clients %v, want %v", got, want)
	}
	if err := a.RegisterClient("a", nil); err != nil {
		t.Fatal(err)
	}
	if got := a.Clients(); len(got) != 0 {
		t.Fatalf("clients %v after the session ended, want none", got)
	}
}

func TestStateValidateNetworkFences(t *testing.T) {
	for _, key := range []string{"10.0.0.1", "10.0.0.1/24", "junk"} {
		s := &State{Volumes: map[string]*Volume{}, NetworkFences: map[string]time.Time{key: t0}}
		if err := s.Validate(); err == nil {
			t.Errorf("network fence %q passed validation", key)
		}
	}
	s := &State{Volumes: map[string]*Volume{}, NetworkFences: map[string]time.Time{"10.0.0.0/24": t0, "fd00::/64": t0}}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	if c := s.Clone(); !reflect.DeepEqual(c, s) {
		t.Errorf("clone %+v, want %+v", c, s)
	}
}
