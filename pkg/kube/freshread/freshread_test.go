package freshread

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryCallerGetsAReadStartedAfterIt: while one read is in flight,
// callers that arrive wait for the next read, which serves all of them;
// the answer each gets was read after it asked.
func TestEveryCallerGetsAReadStartedAfterIt(t *testing.T) {
	var g Group[int]
	var reads atomic.Int32
	release := make(chan struct{})
	started := make(chan int, 10)
	read := func(context.Context) (int, error) {
		n := int(reads.Add(1))
		started <- n
		if n == 1 {
			<-release // the first read is in flight while the others ask
		}
		return n, nil
	}
	ctx := context.Background()
	first := make(chan int)
	go func() {
		v, _ := g.Read(ctx, "node-a", read)
		first <- v
	}()
	if n := <-started; n != 1 {
		t.Fatalf("first read %d", n)
	}
	const waiters = 5
	var wg sync.WaitGroup
	got := make([]int, waiters)
	for i := range waiters {
		wg.Go(func() { got[i], _ = g.Read(ctx, "node-a", read) })
	}
	// Every waiter waits for the next read: let the first one end.
	waitQueued(t, &g, "node-a", waiters)
	close(release)
	if v := <-first; v != 1 {
		t.Fatalf("the first caller got read %d, want 1", v)
	}
	wg.Wait()
	for i, v := range got {
		if v != 2 {
			t.Errorf("waiter %d got read %d, want 2 (the read that started after it asked)", i, v)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads for 6 callers, want 2", n)
	}
}

// waitQueued waits until key has a next read queued, shared by n callers.
func waitQueued(t *testing.T, g *Group[int], key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		s := g.keys[key]
		queued := s != nil && s.next != nil && s.next.callers == n
		g.mu.Unlock()
		if queued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no read queued behind the one in flight")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKeysAreIndependent: a read of one key never serves another, and a
// caller alone reads at once.
func TestKeysAreIndependent(t *testing.T) {
	var g Group[string]
	for _, k := range []string{"a", "b", "a"} {
		v, err := g.Read(context.Background(), k, func(context.Context) (string, error) { return k, nil })
		if err != nil || v != k {
			t.Fatalf("Read(%s) = %q, %v", k, v, err)
		}
	}
	if len(g.keys) != 0 {
		t.Fatalf("state left behind: %v", g.keys)
	}
}

// TestErrorsAndCancellation: a failed read fails its callers; a caller
// whose context ends stops waiting, and the read it did not start still
// serves the others.
func TestErrorsAndCancellation(t *testing.T) {
	var g Group[int]
	boom := errors.New("boom")
	if _, err := g.Read(context.Background(), "k", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	release := make(chan struct{})
	go func() {
		_, _ = g.Read(context.Background(), "k", func(context.Context) (int, error) { <-release; return 1, nil })
	}()
	waitRunning(t, &g, "k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := g.Read(ctx, "k", func(context.Context) (int, error) { return 2, nil })
		errc <- err
	}()
	waitQueued(t, &g, "k", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller got %v", err)
	}
	close(release)
}

func waitRunning(t *testing.T, g *Group[int], key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		s := g.keys[key]
		g.mu.Unlock()
		if s != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no read in flight")
		}
		time.Sleep(time.Millisecond)
	}
}
