package nodefencing

import (
	"slices"
	"sync"

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
