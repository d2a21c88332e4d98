package keyloop

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
)

// Run returns only once the sync under way has returned, however long it
// takes to stop: a leader releases its Lease when Run returns.
func TestRunWaitsForTheSyncUnderWay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	started, finish := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	l := New(Config{Name: "test", KeyName: "key"}, func(ctx context.Context, key string) (time.Duration, error) {
		close(started)
		<-ctx.Done()
		<-finish // a power-off attempt still under way
		finished.Store(true)
		return 0, nil
	})
	l.Add("a")
	returned := make(chan struct{})
	go func() { l.Run(ctx, 2); close(returned) }()
	<-started
	cancel()
	select {
	case <-returned:
		t.Fatal("Run returned while a sync was still running")
	case <-time.After(200 * time.Millisecond):
	}
	close(finish)
	<-returned
	if !finished.Load() {
		t.Fatal("Run returned before the sync finished")
	}
}

// An error requeues the key with backoff; a requeue-after looks at it
// again; success forgets it. One key is never synced by two workers at once.
func TestSyncOutcomes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var calls, running, overlap atomic.Int32
	done := make(chan struct{})
	l := New(Config{Name: "test", KeyName: "key", BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}, func(ctx context.Context, key string) (time.Duration, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		switch calls.Add(1) {
		case 1:
			return 0, errors.New("transient")
		case 2:
			return time.Millisecond, nil
		case 3:
			close(done)
		}
		return 0, nil
	})
	go l.Run(ctx, 4)
	for range 10 {
		l.Add("a")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("after %d syncs: want an error retried, then a requeue-after, then success", calls.Load())
	}
	if overlap.Load() != 0 {
		t.Errorf("one key was synced by two workers at once %d times", overlap.Load())
	}
}

// A failed sync counts a retry until a success or Forget resets it; Drain
// empties the queue as successes would.
func TestBackoffBookkeeping(t *testing.T) {
	l := New(Config{Name: "test", BaseDelay: time.Hour, MaxDelay: time.Hour, RetryVerbosity: 2}, func(context.Context, string) (time.Duration, error) {
		return 0, errors.New("failing")
	})
	_, ctx := ktesting.NewTestContext(t)
	l.Add("a")
	l.Add("b")
	for range 2 { // one failed sync each
		if !l.next(ctx) {
			t.Fatal("queue shut down")
		}
	}
	if l.NumRequeues("a") != 1 || l.NumRequeues("b") != 1 {
		t.Fatalf("requeues a=%d b=%d after one failure each, want 1", l.NumRequeues("a"), l.NumRequeues("b"))
	}
	l.Forget("a")
	if l.NumRequeues("a") != 0 {
		t.Errorf("requeues of a = %d after Forget, want 0", l.NumRequeues("a"))
	}
	l.Add("c")
	if got := l.Drain(); len(got) != 1 || got[0] != "c" || l.Len() != 0 {
		t.Errorf("Drain = %v (left %d), want [c] (a and b wait out their backoff)", got, l.Len())
	}
}

// OldestWait is the age of the key that has waited longest for a worker;
// a key taken after SlowWait or more is logged at default verbosity, one
// taken sooner is not.
func TestBacklogWait(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	l := New(Config{Name: "va", Clock: clk, SlowWait: 30 * time.Second}, func(context.Context, string) (time.Duration, error) {
		return 0, nil
	})
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(0)))
	ctx := klog.NewContext(context.Background(), logger)
	buffer := logger.GetSink().(ktesting.Underlier).GetBuffer()

	if got := l.OldestWait(); got != 0 {
		t.Fatalf("OldestWait of an empty queue = %v, want 0", got)
	}
	l.Add("old")
	clk.Step(40 * time.Second)
	l.Add("new")
	l.Add("old") // queued again: it keeps waiting since its first Add
	clk.Step(5 * time.Second)
	if got := l.OldestWait(); got != 45*time.Second {
		t.Fatalf("OldestWait = %v, want 45s (the first key's wait)", got)
	}
	l.next(ctx) // takes "old", 45 s after it was added
	if got := l.OldestWait(); got != 5*time.Second {
		t.Fatalf("OldestWait after the oldest key was taken = %v, want 5s", got)
	}
	if !strings.Contains(buffer.String(), `key="old"`) || !strings.Contains(buffer.String(), `wait="45s"`) {
		t.Errorf("a key that waited 45 s (SlowWait 30 s) was not logged at default verbosity:\n%s", buffer.String())
	}
	l.next(ctx) // takes "new", 5 s after it was added
	if strings.Contains(buffer.String(), `key="new"`) {
		t.Errorf("a key that waited 5 s was logged as slow:\n%s", buffer.String())
	}
	if got := l.OldestWait(); got != 0 {
		t.Errorf("OldestWait of a drained queue = %v, want 0", got)
	}
}
