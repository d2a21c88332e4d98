// Package fakewatch lets a test wait until the informers on client-go's
// fake clientsets are watching. The fake's tracker replays objects by
// resourceVersion when a watch starts, but an object deleted between an
// informer's list and the start of its watch is never delivered: the
// informer's cache keeps it for good, and the test waits on a state that
// never comes. A test that changes objects after its informers synced
// waits for their watches first.
package fakewatch

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
)

// Client is what Track needs of a generated fake clientset.
type Client interface {
	PrependWatchReactor(resource string, reaction clienttesting.WatchReactionFunc)
	Tracker() clienttesting.ObjectTracker
}

// Watches counts the watches started on the tracked clientsets.
type Watches struct {
	mu      sync.Mutex
	started int
	changed chan struct{} // closed and replaced on every start
}

// Track counts every watch started on clients from now on; call it before
// the informers start. Each watch is served by the client's tracker with
// the watch's options, as the fake's own reactor does, and counted once
// the tracker has registered it.
func Track(clients ...Client) *Watches {
	w := &Watches{changed: make(chan struct{})}
	for _, c := range clients {
		c.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
			var opts metav1.ListOptions
			if wa, ok := action.(clienttesting.WatchActionImpl); ok {
				opts = wa.ListOptions
			}
			wi, err := c.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
			if err != nil {
				return true, nil, err
			}
			w.mu.Lock()
			w.started++
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			return true, wi, nil
		})
	}
	return w
}

// Wait waits until at least n watches have started, or ctx ends.
func (w *Watches) Wait(ctx context.Context, n int) error {
	for {
		w.mu.Lock()
		started, changed := w.started, w.changed
		w.mu.Unlock()
		if started >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d informer watches started: %w", started, n, ctx.Err())
		case <-changed:
		}
	}
}
