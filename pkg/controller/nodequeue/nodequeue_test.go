package nodequeue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// recorder is a SyncFunc that records calls and replays scripted results.
type recorder struct {
	mu      sync.Mutex
	calls   map[string]int
	results map[string][]result
}

type result struct {
	after time.Duration
	err   error
}

func (r *recorder) sync(_ context.Context, node string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.calls[node]
	r.calls[node]++
	if rs := r.results[node]; n < len(rs) {
		return rs[n].after, rs[n].err
	}
	return 0, nil
}

func (r *recorder) count(node string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[node]
}

func TestQueue(t *testing.T) {
	r := &recorder{calls: map[string]int{}, results: map[string][]result{
		"failing": {{err: errors.New("boom")}, {err: errors.New("boom")}},
		"later":   {{after: 50 * time.Millisecond}},
	}}
	q := New("test", r.sync)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { q.Run(ctx, 2); close(done) }()
	defer func() { cancel(); <-done }()

	q.Enqueue("plain")
	q.Enqueue("failing")
	q.Enqueue("later")
	q.Enqueue("") // ignored
	for _, tc := range []struct {
		node string
		want int
	}{
		{"plain", 1},   // synced once
		{"failing", 3}, // two errors, retried with backoff, then success
		{"later", 2},   // asked to look again later
	} {
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return r.count(tc.node) >= tc.want, nil
		}); err != nil {
			t.Errorf("node %s synced %d times, want %d", tc.node, r.count(tc.node), tc.want)
		}
	}
	if n := r.count(""); n != 0 {
		t.Errorf("empty node name synced %d times", n)
	}
}

func TestTaintClock(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewTaintClock("k")
	c.now = func() time.Time { return now }
	tainted := &v1.Node{Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}}}}
	c.Observe("n1", &v1.Node{})
	if !c.Since("n1").IsZero() {
		t.Fatal("untainted node has a taint time")
	}
	c.Observe("n1", tainted)
	first := now
	now = now.Add(time.Minute)
	c.Observe("n1", tainted) // later updates keep the first sighting
	if got := c.Since("n1"); !got.Equal(first) {
		t.Errorf("Since = %v, want the first sighting %v", got, first)
	}
	c.Observe("n1", nil) // node deleted
	if !c.Since("n1").IsZero() {
		t.Error("deleted node keeps its taint time")
	}
	if got := Latest(first, time.Time{}, now); !got.Equal(now) {
		t.Errorf("Latest = %v, want %v", got, now)
	}
}

func TestClockedNodeHandler(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	node := func(rv string, tainted bool) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: rv}}
		if tainted {
			n.Spec.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}}
		}
		return n
	}
	tests := []struct {
		name string
		// seed is observed by the clock before the event.
		seed      *v1.Node
		event     func(h cache.ResourceEventHandler)
		changed   bool // what the controller's filter answers
		wantClock bool // whether the clock holds a time for n1 afterwards
		wantQueue int
	}{
		{
			name:      "add of a tainted node starts the clock and enqueues",
			event:     func(h cache.ResourceEventHandler) { h.OnAdd(node("1", true), false) },
			wantClock: true,
			wantQueue: 1,
		},
		{
			name:      "add of an untainted node enqueues without a time",
			event:     func(h cache.ResourceEventHandler) { h.OnAdd(node("1", false), false) },
			wantQueue: 1,
		},
		{
			name:      "update the filter ignores still starts the clock",
			event:     func(h cache.ResourceEventHandler) { h.OnUpdate(node("1", false), node("2", true)) },
			wantClock: true,
		},
		{
			name:      "update the filter cares about enqueues",
			event:     func(h cache.ResourceEventHandler) { h.OnUpdate(node("1", false), node("2", true)) },
			changed:   true,
			wantClock: true,
			wantQueue: 1,
		},
		{
			name:      "update that removes the taint stops the clock",
			seed:      node("1", true),
			event:     func(h cache.ResourceEventHandler) { h.OnUpdate(node("1", true), node("2", false)) },
			changed:   true,
			wantQueue: 1,
		},
		{
			name:      "delete forgets the node and enqueues",
			seed:      node("1", true),
			event:     func(h cache.ResourceEventHandler) { h.OnDelete(node("1", true)) },
			wantQueue: 1,
		},
		{
			name: "delete seen as a tombstone forgets the node too",
			seed: node("1", true),
			event: func(h cache.ResourceEventHandler) {
				h.OnDelete(cache.DeletedFinalStateUnknown{Key: "n1", Obj: node("1", true)})
			},
			wantQueue: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewTaintClock("k")
			clock.now = func() time.Time { return t0 }
			if tc.seed != nil {
				clock.Observe(tc.seed.Name, tc.seed)
			}
			q := New("test", func(context.Context, string) (time.Duration, error) { return 0, nil })
			defer q.loop.ShutDown()
			tc.event(q.ClockedNodeHandler(clock, func(_, _ *v1.Node) bool { return tc.changed }))
			if got := !clock.Since("n1").IsZero(); got != tc.wantClock {
				t.Errorf("clock has a time for n1: %v, want %v", got, tc.wantClock)
			}
			if got := q.Len(); got != tc.wantQueue {
				t.Errorf("queue length = %d, want %d", got, tc.wantQueue)
			}
		})
	}
}

func TestDeletedObject(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{NodeName: "n1"}}
	for _, obj := range []any{pod, cache.DeletedFinalStateUnknown{Key: "default/p", Obj: pod}} {
		if got, ok := DeletedObject[*v1.Pod](obj); !ok || got != pod {
			t.Errorf("DeletedObject(%T) = %v, %v; want the pod", obj, got, ok)
		}
	}
	for _, obj := range []any{&v1.Node{}, cache.DeletedFinalStateUnknown{Key: "n1", Obj: &v1.Node{}}, nil} {
		if got, ok := DeletedObject[*v1.Pod](obj); ok {
			t.Errorf("DeletedObject(%T) = %v, true; want false", obj, got)
		}
	}
}

func TestPodHandler(t *testing.T) {
	pod := func(rv, node string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv}, Spec: v1.PodSpec{NodeName: node}}
	}
	tests := []struct {
		name      string
		event     func(h cache.ResourceEventHandler)
		changed   bool // what the controller's filter answers
		wantQueue int
	}{
		{"add enqueues the pod's node", func(h cache.ResourceEventHandler) { h.OnAdd(pod("1", "n1"), false) }, false, 1},
		{"add of an unscheduled pod enqueues nothing", func(h cache.ResourceEventHandler) { h.OnAdd(pod("1", ""), false) }, false, 0},
		{"update the filter ignores", func(h cache.ResourceEventHandler) { h.OnUpdate(pod("1", "n1"), pod("2", "n1")) }, false, 0},
		{"update the filter cares about", func(h cache.ResourceEventHandler) { h.OnUpdate(pod("1", "n1"), pod("2", "n1")) }, true, 1},
		{"resync always enqueues", func(h cache.ResourceEventHandler) { h.OnUpdate(pod("1", "n1"), pod("1", "n1")) }, false, 1},
		{"delete enqueues", func(h cache.ResourceEventHandler) { h.OnDelete(pod("1", "n1")) }, false, 1},
		{"delete seen as a tombstone enqueues", func(h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod("1", "n1")})
		}, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New("test", func(context.Context, string) (time.Duration, error) { return 0, nil })
			defer q.loop.ShutDown()
			tc.event(q.PodHandler(func(_, _ *v1.Pod) bool { return tc.changed }))
			if got := q.Len(); got != tc.wantQueue {
				t.Errorf("queue length = %d, want %d", got, tc.wantQueue)
			}
		})
	}
}
