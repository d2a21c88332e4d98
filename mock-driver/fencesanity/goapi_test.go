package fencesanity

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/fence/sanity"
)

// layout is how the mock's sockets are laid out.
type layout string

const (
	// oneSocket serves Identity, Controller and Node for node-1 on one
	// socket.
	oneSocket layout = "one socket"
	// split serves the controller on its own socket and node-1 and node-2
	// on sockets of their own, like split controller/node plugins.
	split layout = "split"
)

// startMock runs the mock in-process and returns the suite configuration
// that reaches it, with an I/O hook that writes through the node's socket.
func startMock(t *testing.T, l layout, mutate func(*driver.Config)) sanity.Config {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "controller.sock")
	if l == oneSocket {
		cfg.NodeID = "node-1"
	} else {
		cfg.NodeEndpoints = map[string]string{
			"node-1": "unix://" + filepath.Join(dir, "node-1.sock"),
			"node-2": "unix://" + filepath.Join(dir, "node-2.sock"),
		}
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start mock driver: %v", err)
	}
	t.Cleanup(d.Stop)
	sc := sanity.Config{ControllerEndpoint: d.Endpoint(), IO: &nodeWriter{t: t, d: d, conns: map[string]*grpc.ClientConn{}}}
	if l == oneSocket {
		sc.Nodes = []sanity.Node{{ID: "node-1"}}
	} else {
		sc.Nodes = []sanity.Node{{Endpoint: d.NodeEndpoint("node-1")}, {ID: "node-2", Endpoint: d.NodeEndpoint("node-2")}}
	}
	return sc
}

// nodeWriter is the I/O hook for the mock: a data-plane write through the
// socket of the node.
type nodeWriter struct {
	t *testing.T
	d *driver.Driver

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Write implements sanity.IOHook.
func (w *nodeWriter) Write(ctx context.Context, volumeID, nodeID string) error {
	conn, err := w.conn(nodeID)
	if err != nil {
		return err
	}
	return client.Write(ctx, conn, volumeID, []byte("fence-sanity"))
}

func (w *nodeWriter) conn(nodeID string) (*grpc.ClientConn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.conns[nodeID]; ok {
		return c, nil
	}
	ep := w.d.NodeEndpoint(nodeID)
	if ep == "" {
		return nil, fmt.Errorf("the mock serves no node %s", nodeID)
	}
	c, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	w.conns[nodeID] = c
	w.t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// TestFenceSanity runs the whole suite, as a driver author would, against
// the mock in each layout and unpublish mode: every case must pass.
func TestFenceSanity(t *testing.T) {
	tests := []struct {
		name   string
		layout layout
		mode   array.UnpublishMode
	}{
		{name: "one socket, strict", layout: oneSocket, mode: array.UnpublishStrict},
		{name: "split plugins, real-array", layout: split, mode: array.UnpublishRealArray},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sanity.Test(t, startMock(t, tc.layout, func(c *driver.Config) { c.Unpublish = tc.mode }))
		})
	}
}

// TestFenceSanityResults checks the outcome of every case against mocks
// that advertise less, or lie: cases that do not apply are skipped, not
// passed, and a driver that advertises UNPUBLISH_FENCE without cutting I/O
// fails the cases that check it, listing the fences included.
func TestFenceSanityResults(t *testing.T) {
	all := func(s sanity.Status) map[string]sanity.Status {
		m := map[string]sanity.Status{}
		for _, c := range sanity.Cases() {
			m[c] = s
		}
		return m
	}
	with := func(m map[string]sanity.Status, kv ...any) map[string]sanity.Status {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(sanity.Status)
		}
		return m
	}
	tests := []struct {
		name   string
		mutate func(*driver.Config)
		noIO   bool
		want   map[string]sanity.Status
	}{
		{name: "fence and force", want: all(sanity.Pass)},
		{
			name: "no extension",
			mutate: func(c *driver.Config) {
				c.Fence, c.ForceUnpublish, c.ListFences, c.LiftFence = false, false, false, false
			},
			want: with(all(sanity.Skip), "discovery", sanity.Pass),
		},
		{
			// The skip paths of the optional calls: the suite never
			// sends what the driver does not advertise.
			name:   "neither list nor lift",
			mutate: func(c *driver.Config) { c.ListFences, c.LiftFence = false, false },
			want:   with(all(sanity.Pass), "list-fences", sanity.Skip, "list-fences-pagination", sanity.Skip, "lift-fence", sanity.Skip),
		},
		{
			name:   "list without lift",
			mutate: func(c *driver.Config) { c.LiftFence = false },
			want:   with(all(sanity.Pass), "lift-fence", sanity.Skip),
		},
		{
			name:   "fence only",
			mutate: func(c *driver.Config) { c.ForceUnpublish = false },
			want:   with(all(sanity.Pass), "force-unpublish", sanity.Skip),
		},
		{
			name:   "force only",
			mutate: func(c *driver.Config) { c.Fence = false },
			// Listing needs no fence of the suite's own to page and to
			// check the codes; the cases that look at one skip.
			want: with(all(sanity.Skip), "discovery", sanity.Pass, "error-codes", sanity.Pass, "force-unpublish", sanity.Pass,
				"list-fences-pagination", sanity.Pass),
		},
		{
			name: "no I/O hook",
			noIO: true,
			want: with(all(sanity.Pass), "fence-cuts-io", sanity.Skip),
		},
		{
			name:   "lying driver, real-array",
			mutate: func(c *driver.Config) { c.Fence, c.FakeFence, c.Unpublish = false, true, array.UnpublishRealArray },
			// What cannot tell a lie from a fence passes; what can fails.
			// The fence it never set is not listed either.
			want: with(all(sanity.Pass), "fence-cuts-io", sanity.Fail, "no-republish-before-cleanup", sanity.Fail,
				"volume-moves", sanity.Fail, "fence-without-node-id", sanity.Fail,
				"list-fences", sanity.Fail, "list-fences-pagination", sanity.Fail, "lift-fence", sanity.Fail),
		},
		{
			// A strict array refuses the plain unpublish the lie turns the
			// fence into: every case that fences a node in use fails.
			name:   "lying driver, strict",
			mutate: func(c *driver.Config) { c.Fence, c.FakeFence = false, true },
			want: with(all(sanity.Fail), "discovery", sanity.Pass, "fence-after-cleanup", sanity.Pass,
				"error-codes", sanity.Pass),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := startMock(t, split, tc.mutate)
			if tc.noIO {
				cfg.IO = nil
			}
			results, err := sanity.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != len(tc.want) {
				t.Fatalf("%d results, want %d: %+v", len(results), len(tc.want), results)
			}
			for _, r := range results {
				if r.Status != tc.want[r.Name] {
					t.Errorf("%s: %s (%s), want %s", r.Name, r.Status, r.Reason, tc.want[r.Name])
				} else {
					t.Logf("%s %s %s", r.Status, r.Name, r.Reason)
				}
			}
		})
	}
}
