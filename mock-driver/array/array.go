// Package array is the mock storage array: volumes, their attachments to
// nodes, fencing, and the node-side records of every node plugin served by
// the same process. It holds the semantics; the gRPC servers in package
// server translate CSI calls into these methods.
//
// Every change is made on a copy of the state, persisted through the
// persist.Store, and only then made visible, so a failed save (or a crash)
// never leaves memory ahead of disk.
package array

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/persist"
)

// DefaultCapacity is the array's size when Options.Capacity is zero.
const DefaultCapacity int64 = 1 << 40 // 1 TiB

// DefaultVolumeSize is the size of a volume created without a capacity
// range.
const DefaultVolumeSize int64 = 1 << 30 // 1 GiB

// Options configure an Array.
type Options struct {
	// Store persists the state; nil keeps it in memory only.
	Store *persist.Store
	// Nodes are the node IDs the array knows (whose plugins are served).
	Nodes []string
	// Capacity is the total size in bytes; DefaultCapacity when zero.
	Capacity int64
	// MaxVolumesPerNode limits attachments per node; zero means no limit.
	MaxVolumesPerNode int64
	// Semantics switch fencing, forced clean-up and the unpublish mode.
	Semantics Semantics
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
	// Storage carries the array's decisions out on real storage; nil (the
	// memory backend) keeps nothing but the bookkeeping.
	Storage Storage
}

// Array is the mock storage array. It is safe for concurrent use.
type Array struct {
	opts      Options
	nodes     map[string]bool
	mu        sync.Mutex
	state     *State
	recovered *persist.CorruptError
	// clients are the addresses each node's plugin registered
	// (RegisterClient); not persisted.
	clients map[string][]netip.Addr
}

// New returns an array, loading its state from opts.Store if there is one.
// A corrupt state file is moved aside and the array starts empty; Recovered
// then reports it.
func New(opts Options) (*Array, error) {
	if opts.Capacity == 0 {
		opts.Capacity = DefaultCapacity
	}
	if opts.Now == nil {
		// Wall clock only: the monotonic reading does not survive a restart.
		opts.Now = func() time.Time { return time.Now().Round(0) }
	}
	a := &Array{opts: opts, nodes: map[string]bool{}, state: &State{Volumes: map[string]*Volume{}}}
	for _, n := range opts.Nodes {
		a.nodes[n] = true
	}
	if opts.Store == nil {
		return a, nil
	}
	var loaded State
	err := opts.Store.Load(&loaded)
	var corrupt *persist.CorruptError
	switch {
	case err == nil:
		if loaded.Volumes == nil {
			loaded.Volumes = map[string]*Volume{}
		}
		a.state = &loaded
	case persist.IsNotExist(err):
	case errors.As(err, &corrupt):
		a.recovered = corrupt
	default:
		return nil, fmt.Errorf("start array: %w", err)
	}
	return a, nil
}

// Recovered returns the corrupt state file that New moved aside, or nil.
func (a *Array) Recovered() *persist.CorruptError { return a.recovered }

// Semantics returns the rules the array was built with.
func (a *Array) Semantics() Semantics { return a.opts.Semantics }

// MaxVolumesPerNode returns the attachment limit per node (0: none).
func (a *Array) MaxVolumesPerNode() int64 { return a.opts.MaxVolumesPerNode }

// Snapshot returns a deep copy of the current state, for inspection.
func (a *Array) Snapshot() *State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state.Clone()
}

// update applies fn to the state. With a Store, fn changes a copy, which is
// persisted and only then made current, so a failed save leaves the state
// unchanged. Without one nothing can fail after fn, which cannot fail
// itself, and fn changes the state in place: copying every volume on every
// change would make each call cost as much as the whole array (70 ms at
// 50,000 volumes).
func (a *Array) update(fn func(s *State)) error {
	if a.opts.Store == nil {
		fn(a.state)
		return nil
	}
	next := a.state.Clone()
	fn(next)
	if err := a.opts.Store.Save(next); err != nil {
		return status.Errorf(codes.Internal, "array could not persist its state: %v", err)
	}
	a.state = next
	return nil
}

// volume returns the volume or a NotFound status.
func volume(s *State, id string) (*Volume, error) {
	v, ok := s.Volumes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	return v, nil
}

func newVolumeID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate volume ID: %w", err)
	}
	return "vol-" + hex.EncodeToString(b), nil
}
