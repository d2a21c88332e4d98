package tgt_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
)

func startBackend(t *testing.T) *tgt.Backend {
	t.Helper()
	iscsi.RequireTgt(t)
	_, ctx := ktesting.NewTestContext(t)
	b, err := tgt.Start(ctx, tgt.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(b.Stop)
	return b
}

// TestBackendsSideBySide: two backends run at once, each on its own
// portal and control port, and Stop leaves no daemon and no control file.
func TestBackendsSideBySide(t *testing.T) {
	a, b := startBackend(t), startBackend(t)
	if a.Portal() == b.Portal() {
		t.Fatalf("both backends serve %s", a.Portal())
	}
	for _, be := range []*tgt.Backend{a, b} {
		if err := be.CreateVolume("vol-1", 1<<20); err != nil {
			t.Fatal(err)
		}
		pc, err := be.Grant("vol-1", "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if pc[tgt.PublishContextPortal] != be.Portal() || pc[tgt.PublishContextInitiator] != "iqn.2026-11.io.fenceline.node:node-a" {
			t.Fatalf("publish context %v", pc)
		}
	}
	a.Stop()
	a.Stop() // idempotent
	if err := b.Fence("vol-1", "node-a"); err != nil {
		t.Fatalf("the other backend after one stopped: %v", err)
	}
	sock := fmt.Sprintf("/var/run/tgtd/socket.%d", a.ControlPort())
	for _, p := range []string{sock, sock + ".lock"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Stop: %v, want it removed", p, err)
		}
	}
}

// TestDeadDaemonIsUnavailable: with tgtd gone, nothing is confirmed: a
// fence, a revoke and a grant fail UNAVAILABLE, never OK on a guess.
func TestDeadDaemonIsUnavailable(t *testing.T) {
	b := startBackend(t)
	if err := b.CreateVolume("vol-1", 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant("vol-1", "node-a"); err != nil {
		t.Fatal(err)
	}
	tgt.KillDaemon(b)
	checks := map[string]error{
		"fence":  b.Fence("vol-1", "node-a"),
		"revoke": b.Revoke("vol-1", "node-a"),
		"create": b.CreateVolume("vol-2", 1<<20),
	}
	_, checks["grant"] = b.Grant("vol-1", "node-b")
	for what, err := range checks {
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s with tgtd dead = %v, want Unavailable", what, err)
		}
	}
}

// TestNodeIDsThatNameNoInitiator: a grant to a node ID that names no
// initiator is refused; a fence of one is in effect by absence, because
// the backend never granted such a name.
func TestNodeIDsThatNameNoInitiator(t *testing.T) {
	b := startBackend(t)
	if err := b.CreateVolume("vol-1", 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant("vol-1", "Node_A"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("grant to Node_A = %v, want InvalidArgument", err)
	}
	if err := b.Fence("vol-1", "Node_A"); err != nil {
		t.Fatalf("fence of Node_A = %v, want OK", err)
	}
	if err := b.DeleteVolume("vol-1"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume("vol-1"); err != nil {
		t.Fatalf("repeated delete: %v", err)
	}
	if _, err := b.Grant("vol-1", "node-a"); status.Code(err) != codes.Unavailable {
		t.Fatalf("grant on a deleted volume = %v, want Unavailable", err)
	}
}
