package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/mock-driver/tgt/initiator"
	"fenceline.io/fenceline/test/iscsi"
)

// TestReservationsOnTgt: two initiators register, one holds a Write
// Exclusive - Registrants Only reservation and preempts the other, whose
// registration is then gone; a refused initiator cannot log in.
func TestReservationsOnTgt(t *testing.T) {
	ctx, b := startBackend(t, 1<<20)
	login := func(node string) (*initiator.Conn, error) {
		pc, err := b.Grant("vol-1", node)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return initiator.Login(ctx, b.Portal(), pc[tgt.PublishContextTarget], pc[tgt.PublishContextInitiator], tgt.LUN, 5*time.Second)
	}
	ctrl, err := login("controller-x")
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	node, err := login("node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	const kc, ka = 0xc0, 0xa0
	steps := []struct {
		c       *initiator.Conn
		action  byte
		key, sa uint64
	}{
		{ctrl, initiator.PRRegisterIgnoreKey, 0, kc},
		{node, initiator.PRRegisterIgnoreKey, 0, ka},
		{ctrl, initiator.PRReserve, kc, 0},
	}
	for _, s := range steps {
		if err := s.c.PROut(s.action, initiator.TypeWriteExclusiveRO, s.key, s.sa); err != nil {
			t.Fatalf("PR OUT %#x: %v", s.action, err)
		}
	}
	r, err := ctrl.ReadReservation()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Held || r.Holder != kc || r.Type != initiator.TypeWriteExclusiveRO || !slices.Contains(r.Keys, ka) {
		t.Fatalf("before the preempt: %+v", r)
	}
	aborted, err := ctrl.Preempt(kc, ka, initiator.TypeWriteExclusiveRO)
	if err != nil {
		t.Fatalf("preempt: %v", err)
	}
	t.Logf("preempted node-a's key; PREEMPT AND ABORT supported: %v", aborted)
	if r, err = ctrl.ReadReservation(); err != nil || slices.Contains(r.Keys, ka) || r.Holder != kc {
		t.Fatalf("after the preempt: %+v, %v", r, err)
	}
	err = node.PROut(initiator.PRReserve, initiator.TypeWriteExclusiveRO, ka, 0)
	var se *initiator.StatusError
	if !errors.As(err, &se) || se.Status != initiator.StatusReservationConflict {
		t.Fatalf("the preempted node's RESERVE = %v, want RESERVATION CONFLICT", err)
	}
	if err := b.Revoke("vol-1", "node-b"); err != nil {
		t.Fatal(err)
	}
	_, err = initiator.Login(ctx, b.Portal(), tgt.TargetPrefix+"vol-1", tgt.InitiatorPrefix+"node-b", tgt.LUN, 5*time.Second)
	if !errors.Is(err, initiator.ErrLoginRefused) {
		t.Fatalf("login of an initiator not in the ACL = %v, want ErrLoginRefused", err)
	}
}

// TestBlockIOOnTgt: blocks written through one session read back through
// another session of the same initiator (a second ISID), and a bad
// transfer size is refused before anything is sent.
func TestBlockIOOnTgt(t *testing.T) {
	const size = 1 << 20
	ctx, b := startBackend(t, size)
	pc, err := b.Grant("vol-1", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	login := func(session string) *initiator.Conn {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := initiator.LoginSession(ctx, b.Portal(), pc[tgt.PublishContextTarget], pc[tgt.PublishContextInitiator], session, tgt.LUN, 5*time.Second)
		if err != nil {
			t.Fatalf("login (session %q): %v", session, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	w := login("")
	blocks, bs, err := w.ReadCapacity()
	if err != nil {
		t.Fatal(err)
	}
	if bs <= 0 || blocks*uint64(bs) != size {
		t.Fatalf("capacity %d blocks of %d bytes, want %d bytes", blocks, bs, size)
	}
	data := make([]byte, 2*bs)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := w.Write(5, data, bs); err != nil {
		t.Fatal(err)
	}
	got, err := login("checker").Read(5, 2, bs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("blocks read through a second session differ from those written")
	}
	if err := w.Write(0, data[:bs-1], bs); err == nil {
		t.Fatal("a write of a partial block was sent")
	}
	// The written session is still usable: the second session had its
	// own ISID and did not replace it.
	if err := w.Write(9, data[:bs], bs); err != nil {
		t.Fatalf("the first session after a second one logged in: %v", err)
	}
}

// startBackend starts a tgt backend with one volume, vol-1, of size bytes.
func startBackend(t *testing.T, size int64) (context.Context, *tgt.Backend) {
	t.Helper()
	iscsi.RequireTgt(t)
	_, ctx := ktesting.NewTestContext(t)
	b, err := tgt.Start(ctx, tgt.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if err := b.CreateVolume("vol-1", size); err != nil {
		t.Fatal(err)
	}
	return ctx, b
}
