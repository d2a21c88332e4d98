package iscsi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/iscsi"
)

// zombie is a node's workload writing in the background through a session
// it never gives up, as a partitioned node's would.
type zombie struct {
	acks   chan struct{}
	done   chan struct{} // closed when the writer stopped; err says why
	err    error
	cancel context.CancelFunc
}

func startZombie(t *testing.T, w *iscsi.Writer) *zombie {
	ctx, cancel := context.WithCancel(context.Background())
	z := &zombie{acks: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	go func() {
		z.err = w.Run(ctx, z.acks)
		close(z.done)
	}()
	t.Cleanup(func() { z.stop() })
	return z
}

// stop stops the writer and returns how it ended (nil: still writing).
func (z *zombie) stop() error {
	z.cancel()
	<-z.done
	return z.err
}

// waitAcks waits for n acknowledged writes, or fails the test.
func (z *zombie) waitAcks(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for i := 0; i < n; i++ {
		select {
		case <-z.acks:
		case <-z.done:
			t.Fatalf("the writer stopped after %d acknowledged writes: %v", i, z.err)
		case <-deadline:
			t.Fatalf("only %d of %d writes acknowledged within %s", i, n, within)
		}
	}
}

// waitWriteFails waits until the writer's next write fails and returns its
// error, or fails the test.
func (z *zombie) waitWriteFails(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-z.done:
		if z.err == nil {
			t.Fatal("the writer stopped without a failed write")
		}
		return z.err
	case <-time.After(within):
		t.Fatalf("the zombie session still writes %s after the fence returned", within)
		return nil
	}
}

// TestZombieSessionAfterFence is the failover the fence exists for: node-a
// keeps writing through its established session while the volume is
// fenced off it and moved to node-b. With acl+sessions (its session ended)
// and pr (its reservation key preempted, the session left alone) the
// zombie's next write fails, a new login is refused, and the bytes on the
// LUN show no write of node-a sent after the fence. With acl the zombie
// keeps writing, and the checker sees it on the bytes: acl is no fence.
func TestZombieSessionAfterFence(t *testing.T) {
	tests := []struct {
		method   tgt.FenceMethod
		wantSafe bool
	}{
		{method: tgt.MethodACLSessions, wantSafe: true},
		{method: tgt.MethodPR, wantSafe: true},
		{method: tgt.MethodACL, wantSafe: false},
	}
	for _, tc := range tests {
		t.Run(string(tc.method), func(t *testing.T) {
			r := newRig(t, string(tc.method))
			vol := r.volume("pvc-zombie")
			optsA := r.attach(vol, "node-a")
			za := startZombie(t, r.writer("node-a", 1, r.login(optsA)))
			za.waitAcks(t, 20, 10*time.Second)

			start := time.Now()
			if err := r.unpublish(vol, "node-a", true); err != nil {
				t.Fatalf("fenced unpublish: %v", err)
			}
			took := time.Since(start)
			r.ledger.FenceReturned("node-a")
			t.Logf("fenced ControllerUnpublishVolume took %s; backend: %+v", took, r.d.Tgt().Stats())

			if _, err := iscsi.Login(optsA); err == nil {
				t.Fatal("node-a logged in anew after the fence")
			} else {
				t.Logf("new login as node-a refused: %v", err)
			}
			if tc.wantSafe {
				err := za.waitWriteFails(t, 5*time.Second)
				var se *iscsi.SCSIError
				if tc.method == tgt.MethodPR && (!errors.As(err, &se) || se.Status != iscsi.StatusReservationConflict) {
					t.Fatalf("the zombie's write after a reservation fence failed with %v, want RESERVATION CONFLICT", err)
				}
				t.Logf("the zombie's next write fails: %v", err)
			} else {
				// The session outlives the revoked ACL: keep it writing
				// across the move to show the checker what acl lets in.
				za.waitAcks(t, 20, 10*time.Second)
				t.Logf("acl only: node-a's session still writes after the fence")
			}

			optsB := r.attach(vol, "node-b")
			wb := r.writer("node-b", 2, r.login(optsB))
			for range 64 {
				if err := wb.WriteNext(); err != nil {
					t.Fatalf("node-b's write after the move: %v", err)
				}
			}
			if !tc.wantSafe {
				za.waitAcks(t, 20, 10*time.Second) // overwriting node-b now
			}
			za.stop()
			violations := r.check(optsB)
			late := r.ledger.AckedAfterFence("node-a")
			switch {
			case tc.wantSafe && (len(violations) > 0 || late > 0):
				t.Fatalf("two writers after a fence with %s: %d of node-a's writes acknowledged after it; checker: %q", tc.method, late, violations)
			case !tc.wantSafe && len(violations) == 0:
				t.Fatalf("the checker saw nothing although node-a's zombie session wrote %d blocks after the fence", late)
			case !tc.wantSafe:
				t.Logf("as expected, %s is no fence: %d of node-a's writes acknowledged after it; checker found %d bad blocks, first: %s", tc.method, late, len(violations), violations[0])
			}
		})
	}
}

// TestPlainUnpublishVersusFence: a plain unpublish revokes the grant, so a
// new login is refused, but leaves the established session writing, as a
// real array's unmapping does; a fence of the same node ends it.
func TestPlainUnpublishVersusFence(t *testing.T) {
	r := newRig(t, string(tgt.MethodACLSessions))
	vol := r.volume("pvc-plain")
	optsA := r.attach(vol, "node-a")
	za := startZombie(t, r.writer("node-a", 1, r.login(optsA)))
	za.waitAcks(t, 5, 10*time.Second)

	if err := r.unpublish(vol, "node-a", false); err != nil {
		t.Fatalf("plain unpublish: %v", err)
	}
	if _, err := iscsi.Login(optsA); err == nil {
		t.Fatal("node-a logged in anew after a plain unpublish")
	}
	za.waitAcks(t, 20, 10*time.Second)
	t.Logf("after a plain unpublish node-a's session still writes, a new login is refused")

	if err := r.unpublish(vol, "node-a", true); err != nil {
		t.Fatalf("fence after the plain unpublish: %v", err)
	}
	r.ledger.FenceReturned("node-a")
	t.Logf("the fence ends it: %v", za.waitWriteFails(t, 5*time.Second))
	if n := r.ledger.AckedAfterFence("node-a"); n > 0 {
		t.Fatalf("%d writes of node-a acknowledged after the fence", n)
	}
}

// TestCleanupRestoresAccess: the fenced node cannot have the volume back
// until its kubelet's unforced clean-up; then a publish grants it again and
// it logs in and writes.
func TestCleanupRestoresAccess(t *testing.T) {
	for _, m := range []tgt.FenceMethod{tgt.MethodACLSessions, tgt.MethodPR} {
		t.Run(string(m), func(t *testing.T) { testCleanupRestoresAccess(t, m) })
	}
}

func testCleanupRestoresAccess(t *testing.T, m tgt.FenceMethod) {
	r := newRig(t, string(m))
	vol := r.volume("pvc-unfence")
	optsA := r.attach(vol, "node-a")
	sa := r.login(optsA)
	if err := r.writer("node-a", 1, sa).WriteNext(); err != nil {
		t.Fatal(err)
	}
	if err := r.unpublish(vol, "node-a", true); err != nil {
		t.Fatalf("fence: %v", err)
	}
	if _, err := r.publish(vol, "node-a"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("publish to the fenced node before its clean-up = %v, want FailedPrecondition", err)
	}
	if _, err := iscsi.Login(optsA); err == nil {
		t.Fatal("the fenced node logged in before its clean-up")
	}
	r.cleanup(vol, "node-a")
	again := r.attach(vol, "node-a")
	if err := r.writer("node-a", 2, r.login(again)).WriteNext(); err != nil {
		t.Fatalf("write after the clean-up and a new publish: %v", err)
	}
}

// TestRestartServesState: a restarted driver starts a new tgtd and serves
// the volumes and grants of its state file; the fenced node stays out.
func TestRestartServesState(t *testing.T) {
	for _, m := range []tgt.FenceMethod{tgt.MethodACLSessions, tgt.MethodPR} {
		t.Run(string(m), func(t *testing.T) { testRestartServesState(t, m) })
	}
}

func testRestartServesState(t *testing.T, m tgt.FenceMethod) {
	r := newRig(t, string(m))
	volA, volB := r.volume("pvc-a"), r.volume("pvc-b")
	optsA := r.attach(volA, "node-a")
	w := r.writer("node-a", 1, r.login(optsA))
	if err := w.WriteNext(); err != nil {
		t.Fatal(err)
	}
	r.attach(volB, "node-b")
	if err := r.unpublish(volB, "node-b", true); err != nil {
		t.Fatal(err)
	}
	oldPortal := r.d.Tgt().Portal()
	r.d.Stop()
	r.start()
	optsA.Portal = r.d.Tgt().Portal()
	if optsA.Portal != oldPortal {
		t.Fatalf("the restarted driver serves portal %s, not %s where its nodes' sessions and publish contexts point", optsA.Portal, oldPortal)
	}
	sa := r.login(optsA) // registers node-a's key again under pr, as a node logging in anew would
	if err := w.WriteNext(); err == nil {
		t.Fatal("the session from before the restart still writes: it cannot, its tgtd is gone")
	}
	w.Session = sa
	if err := w.WriteNext(); err != nil {
		t.Fatalf("node-a's write after the restart: %v", err)
	}
	img, err := iscsi.ReadAll(optsA, 64)
	if err != nil {
		t.Fatalf("node-a after the restart: %v", err)
	}
	if v := r.ledger.Check(img, len(img)/64); len(v) > 0 {
		t.Fatal(v)
	}
	s, ok := iscsi.ParseBlock(img[int(w.Base+uint32(w.Stamp.Seq%64))*len(img)/64:][:len(img)/64])
	if !ok || s != w.Stamp {
		t.Fatalf("the block written before the restart reads %+v, %v; want %+v", s, ok, w.Stamp)
	}
	optsB := optsA
	optsB.Target, _ = tgt.TargetName(volB)
	optsB.Initiator, _ = tgt.InitiatorName("node-b")
	if _, err := iscsi.Login(optsB); err == nil {
		t.Fatal("the node fenced before the restart logged in after it")
	}
}
