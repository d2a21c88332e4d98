package nodequeue

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// TaintClock remembers when this process first saw a taint key on each node.
// Taints added by kubectl carry no timeAdded, and the API's timestamps have
// one-second resolution, so the informer's observation time is the best
// sub-second "trigger" time for the latency metric.
type TaintClock struct {
	key string
	now func() time.Time
	mu  sync.Mutex
	at  map[string]time.Time
}

// NewTaintClock creates a clock for one taint key.
func NewTaintClock(key string) *TaintClock {
	return &TaintClock{key: key, now: time.Now, at: map[string]time.Time{}}
}

// Observe updates the clock from the latest state of a node; call it from
// the node event handlers. A nil node (deleted) forgets it.
func (c *TaintClock) Observe(name string, node *v1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !nodeutil.HasTaint(node, c.key) {
		delete(c.at, name)
		return
	}
	if _, ok := c.at[name]; !ok {
		c.at[name] = c.now()
	}
}

// Since returns when the taint was first seen on the node (zero if never).
func (c *TaintClock) Since(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[name]
}

// Latest returns the latest of the given times.
func Latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}
