package iscsi_test

import (
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSessionSurvivesSignals: a test process (the Go runtime, children
// exiting) delivers signals to the thread waiting on the target. Each one
// interrupts its poll; the session must treat that as nothing happened,
// not as a failed command left queued (libiscsi's own synchronous calls
// give up on it and leave the command pointing into a dead stack frame).
// Every write and read here is interrupted many times, and all must
// succeed with the bytes written.
func TestSessionSurvivesSignals(t *testing.T) {
	r := newRig(t, "acl+sessions")
	vol := r.volume("pvc-signals")
	s := r.login(r.attach(vol, "node-a"))
	w := r.writer("node-a", 1, s)

	// The commands run on this goroutine's thread, which another goroutine
	// signals for as long as they run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid, pid := syscall.Gettid(), syscall.Getpid()
	stop := make(chan struct{})
	var signalled int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := syscall.Tgkill(pid, tid, syscall.SIGURG); err != nil {
				t.Errorf("signal the initiator's thread: %v", err)
				return
			}
			signalled++
			time.Sleep(50 * time.Microsecond)
		}
	})
	const writes = 300
	var failed error
	for i := 0; i < writes && failed == nil; i++ {
		failed = w.WriteNext()
	}
	var img []byte
	if failed == nil {
		img, failed = s.Read(0, 64)
	}
	close(stop)
	wg.Wait()
	if failed != nil {
		t.Fatalf("a command interrupted by signals failed (%d signals sent): %v", signalled, failed)
	}
	if v := r.ledger.Check(img, s.BlockSize()); len(v) > 0 {
		t.Fatalf("the bytes read back differ from the %d acknowledged writes: %q", writes, v)
	}
	t.Logf("%d writes and a read of 64 blocks under %d signals to the initiator's thread", writes, signalled)
}
