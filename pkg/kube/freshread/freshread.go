// Package freshread shares fresh reads of one object among the callers
// that need it at about the same time, without weakening what "fresh"
// means: every caller gets the result of a read that started after it
// asked. A decision that re-reads an object from the API server before it
// acts (a plain detach confirming that its Node is not cut off) must not
// take an answer that was on its way before it looked: that answer may
// predate what made it look. So a caller never joins a read in flight; it
// waits for the next one, which starts when the one in flight ends and
// serves everyone who asked meanwhile. A burst of N callers for one key
// costs two reads, not N.
package freshread

import (
	"context"
	"sync"
)

// Group shares reads per key. The zero value is ready to use.
type Group[T any] struct {
	mu   sync.Mutex
	keys map[string]*state[T]
}

// state is one key's read in flight and the next one, which starts when
// it ends.
type state[T any] struct {
	running, next *call[T]
}

// call is one read and its result, shared by its callers.
type call[T any] struct {
	read func(context.Context) (T, error)
	ctx  context.Context
	done chan struct{}
	// callers counts who shares the read.
	callers int
	val     T
	err     error
}

// Read returns the result of read for key, made by a read that started
// after this call did: its own, or the next read of the key that other
// callers wait for too. A read runs with the context of the caller that
// asked for it first: when that context ends, the read fails for every
// caller that shares it (they retry, as after any failed read), so a read
// never outlives every caller. A caller whose ctx ends stops waiting with
// ctx's error.
func (g *Group[T]) Read(ctx context.Context, key string, read func(context.Context) (T, error)) (T, error) {
	g.mu.Lock()
	if g.keys == nil {
		g.keys = map[string]*state[T]{}
	}
	s := g.keys[key]
	if s == nil {
		s = &state[T]{}
		g.keys[key] = s
	}
	var c *call[T]
	start := false
	switch {
	case s.running == nil:
		c = newCall(ctx, read)
		s.running, start = c, true
	case s.next == nil:
		c = newCall(ctx, read)
		s.next = c
	default:
		c = s.next
	}
	c.callers++
	g.mu.Unlock()
	if start {
		g.run(key, c)
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func newCall[T any](ctx context.Context, read func(context.Context) (T, error)) *call[T] {
	return &call[T]{read: read, ctx: ctx, done: make(chan struct{})}
}

// run makes c's read, then starts the key's next read, if anyone waits
// for one, in the background.
func (g *Group[T]) run(key string, c *call[T]) {
	c.val, c.err = c.read(c.ctx)
	close(c.done)
	g.mu.Lock()
	s := g.keys[key]
	next := s.next
	s.running, s.next = next, nil
	if next == nil {
		delete(g.keys, key)
	}
	g.mu.Unlock()
	if next != nil {
		go g.run(key, next)
	}
}
