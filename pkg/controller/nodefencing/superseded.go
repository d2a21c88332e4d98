package nodefencing

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// superseded remembers, per FencingRequest UID, the resourceVersions its
// status writes replaced, until the cache shows another one. A sync that
// still sees one of them in the cache would take again the step its own
// write just took (each step a node write and a status write, every one
// decided again on fresh data: correct, but seconds of round trips on a
// slow API server); it waits for the update event instead. Losing the
// marks (a restart) only costs that repeated work.
type superseded struct {
	mu  sync.Mutex
	rvs map[types.UID][]string
}

// mark records that a write replaced these versions of the request.
func (s *superseded) mark(uid types.UID, rvs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rvs == nil {
		s.rvs = map[types.UID][]string{}
	}
	for _, rv := range rvs {
		if rv != "" && !slices.Contains(s.rvs[uid], rv) {
			s.rvs[uid] = append(s.rvs[uid], rv)
		}
	}
}

// stale reports whether r, as the cache has it, is a version this
// controller's own write replaced. Any other version means the cache caught
// up (or moved past), and the marks are dropped.
func (s *superseded) stale(r *fencingv1alpha1.FencingRequest) bool {
	if r == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rvs, ok := s.rvs[r.UID]
	if !ok {
		return false
	}
	if slices.Contains(rvs, r.ResourceVersion) {
		return true
	}
	delete(s.rvs, r.UID)
	return false
}

// createdWait bounds how long a sync waits for the cache to show a request
// this controller created: a watch delivers it in well under a second,
// and an add event lost to a re-list must not hold the node for longer.
const createdWait = 10 * time.Second

// created remembers, per node, the FencingRequest this controller last
// created, until the cache shows it. A sync on a cache that does not hold
// it yet would decide to create one again: the fresh re-check refuses that,
// but only after a round of reads, seconds on a slow API server. The sync
// waits for the request's add event instead, for createdWait at most.
// Losing the marks (a restart) only costs that round of reads.
type created struct {
	mu     sync.Mutex
	byNode map[string]createdMark
}

type createdMark struct {
	uid types.UID
	at  time.Time
}

// mark records that this controller created request uid for node at at.
func (s *created) mark(node string, uid types.UID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byNode == nil {
		s.byNode = map[string]createdMark{}
	}
	s.byNode[node] = createdMark{uid: uid, at: at}
}

// pending reports whether node has a request this controller created that
// its cached requests (read with cached, only for a node with a mark) do
// not show yet, created less than createdWait before now. A mark the
// cache caught up with, or an older one, is dropped.
func (s *created) pending(node string, now time.Time, cached func(string) ([]*fencingv1alpha1.FencingRequest, error)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byNode[node]
	if !ok {
		return false
	}
	reqs, err := cached(node)
	if err != nil {
		return false // the sync reads the cache again and reports the error
	}
	shown := slices.ContainsFunc(reqs, func(r *fencingv1alpha1.FencingRequest) bool { return r.UID == m.uid })
	if shown || now.Sub(m.at) >= createdWait {
		delete(s.byNode, node)
		return false
	}
	return true
}
