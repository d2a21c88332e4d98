package fencesanity

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/pkg/fence/sanity"
	"fenceline.io/fenceline/test/iscsi"
)

// iscsiWriter is the I/O hook on the tgt backend: a node writes through
// an iSCSI session of its own initiator that it keeps between writes, as a
// node keeps the session it logged in with at staging. When a write fails
// it logs in again once and retries, as an initiator reconnects: a fence
// must hold against both.
type iscsiWriter struct {
	portal string
	method tgt.FenceMethod

	mu       sync.Mutex
	sessions map[string]*iscsi.Session // node/volume -> session
	seq      uint64
}

// Write implements sanity.IOHook.
func (w *iscsiWriter) Write(_ context.Context, volumeID, nodeID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := nodeID + "/" + volumeID
	if s := w.sessions[key]; s != nil {
		err := w.writeBlock(s, nodeID)
		if err == nil {
			return nil
		}
		_ = s.Close()
		delete(w.sessions, key)
	}
	opts, err := loginOptions(w.portal, volumeID, nodeID)
	if err != nil {
		return err
	}
	if w.method == tgt.MethodPR {
		opts.ReservationKey = tgt.ReservationKey(nodeID) // registered at login, as at staging
	}
	s, err := iscsi.Login(opts)
	if err != nil {
		return err
	}
	w.sessions[key] = s
	return w.writeBlock(s, nodeID)
}

func (w *iscsiWriter) writeBlock(s *iscsi.Session, nodeID string) error {
	w.seq++
	block := iscsi.Stamp{Node: nodeID, Seq: w.seq}.Block(s.BlockSize())
	err := s.Write(0, block)
	for retry := 0; retry < 3 && iscsi.IsUnitAttention(err); retry++ {
		err = s.Write(0, block)
	}
	return err
}

func (w *iscsiWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.sessions {
		_ = s.Close()
	}
}

func loginOptions(portal, volumeID, nodeID string) (iscsi.Options, error) {
	target, err := tgt.TargetName(volumeID)
	if err != nil {
		return iscsi.Options{}, err
	}
	initiator, err := tgt.InitiatorName(nodeID)
	if err != nil {
		return iscsi.Options{}, err
	}
	return iscsi.Options{Portal: portal, Target: target, LUN: tgt.LUN, Initiator: initiator}, nil
}

// startTgtMock runs the mock on the tgt backend with split plugins for
// node-1 and node-2, and returns the suite configuration with the iSCSI
// I/O hook.
func startTgtMock(t *testing.T, method tgt.FenceMethod) sanity.Config {
	t.Helper()
	iscsi.Require(t)
	_, ctx := ktesting.NewTestContext(t)
	cfg := iscsi.TgtDriverConfig(t, string(method), "node-1", "node-2")
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start the mock on tgt: %v", err)
	}
	t.Cleanup(d.Stop)
	w := &iscsiWriter{portal: d.Tgt().Portal(), method: method, sessions: map[string]*iscsi.Session{}}
	t.Cleanup(w.close) // runs before d.Stop
	return sanity.Config{
		ControllerEndpoint: d.Endpoint(),
		Nodes:              []sanity.Node{{Endpoint: d.NodeEndpoint("node-1")}, {ID: "node-2", Endpoint: d.NodeEndpoint("node-2")}},
		IO:                 w,
		CapacityBytes:      1 << 20,
	}
}

// TestFenceSanityOnTgt runs the whole fence-sanity suite against the mock
// on a real iSCSI target, with I/O through real sessions. acl+sessions and
// pr pass every case, listing and lifting fences included; acl, which
// leaves the fenced node's session writing, fails exactly the cases that
// write after a fence (lift-fence checks that the node cannot write before
// it lifts).
func TestFenceSanityOnTgt(t *testing.T) {
	tests := []struct {
		method tgt.FenceMethod
		fail   []string
	}{
		{method: tgt.MethodACLSessions},
		{method: tgt.MethodPR},
		{method: tgt.MethodACL, fail: []string{"fence-cuts-io", "volume-moves", "fence-without-node-id", "lift-fence"}},
	}
	for _, tc := range tests {
		t.Run(string(tc.method), func(t *testing.T) {
			cfg := startTgtMock(t, tc.method)
			results, err := sanity.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]sanity.Status{}
			for _, c := range sanity.Cases() {
				want[c] = sanity.Pass
			}
			for _, c := range tc.fail {
				want[c] = sanity.Fail
			}
			for _, r := range results {
				line := fmt.Sprintf("%s %s %s", r.Status, r.Name, r.Reason)
				if r.Status != want[r.Name] {
					t.Errorf("%s, want %s", line, want[r.Name])
				} else {
					t.Log(line)
				}
			}
			if len(results) != len(want) {
				t.Errorf("%d results, want %d", len(results), len(want))
			}
		})
	}
}
