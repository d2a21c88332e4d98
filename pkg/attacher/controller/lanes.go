package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes"

	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// lane is one of the VolumeAttachment queues. A failover waits behind no
// one's routine work: the attaches of a StatefulSet scaling up and the
// detaches of one scaling down have their own queues and workers, and the
// work that moves a volume off a lost node has a third, served by its own
// workers through its own client-side API budget.
type lane int

const (
	// laneAttach keeps upstream's queue name: its metrics and alerts
	// still see attaches, the bulk of what that queue held upstream.
	laneAttach lane = iota
	laneDetach
	laneFailover
	laneCount
)

// laneNames are the queues' names in logs and workqueue metrics; every
// one starts with upstream's, so name=~"csi-attacher-va.*" sums them.
var laneNames = [laneCount]string{"csi-attacher-va", "csi-attacher-va-detach", "csi-attacher-va-failover"}

func (l lane) String() string { return laneNames[l] }

// laneInput is what chooseLane looks at, all from the informer caches.
type laneInput struct {
	// Detach is needsDetach: the VolumeAttachment is being deleted and
	// still carries our finalizer.
	Detach bool
	// FenceKnown: a fence record or intent is on the VolumeAttachment or
	// remembered for it.
	FenceKnown bool
	// NodeCutOff: the cached Node has a reason to fence (cutoff.NodeReason),
	// or no Node object exists.
	NodeCutOff bool
	// VolumeMoving: the volume's previous attachment was lately detached
	// with a fence (fencing cut its node off), so this attach is the
	// replacement of a failover.
	VolumeMoving bool
	// RecordDue: not being deleted, with our finalizer and a controller's
	// fence intent but no record of ours yet: the record is written ahead
	// of the detach (fencing.RecordAhead).
	RecordDue bool
}

// chooseLane picks a VolumeAttachment's queue. It orders work and decides
// nothing about safety: every sync decides again from its own inputs, in
// whichever queue it runs. A detach from a cut-off node (or one already
// recorded as fenced) and the attach that follows it are failover work.
func chooseLane(in laneInput) lane {
	switch {
	case in.Detach && (in.FenceKnown || in.NodeCutOff):
		return laneFailover
	case in.Detach:
		return laneDetach
	case in.VolumeMoving || in.RecordDue:
		return laneFailover
	default:
		return laneAttach
	}
}

// movedFor is how long an attach of a volume whose previous attachment was
// detached with a fence counts as failover work: the attach/detach
// controller creates the replacement's VolumeAttachment within seconds of
// the detach, and a volume that moved longer ago is routine again.
const movedFor = 10 * time.Minute

// laneOf classifies a cached VolumeAttachment.
func (c *Controller) laneOf(va *storagev1.VolumeAttachment) lane {
	in := laneInput{Detach: needsDetach(va, c.cfg.DriverName, c.finalizer)}
	if in.Detach {
		in.FenceKnown = c.track.hasFence(va)
		if !c.cfg.Blind {
			node, err := nodeutil.Lookup(c.nodeLister, va.Spec.NodeName)
			in.NodeCutOff = err == nil && (node == nil || cutoff.NodeReason(node, cutoff.SafeDetachEnabled(c.csiDriver())) != cutoff.ReasonNone)
		}
	} else if va.DeletionTimestamp == nil {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			in.VolumeMoving = c.moves.recent(*pv, time.Now())
		}
		_, intent := va.Annotations[names.FenceIntentAnnotation]
		_, record := va.Annotations[names.FenceRecordAnnotation]
		in.RecordDue = intent && !record && slices.Contains(va.Finalizers, c.finalizer)
	}
	return chooseLane(in)
}

// enqueue queues a VolumeAttachment in the lane it belongs to now.
func (c *Controller) enqueue(va *storagev1.VolumeAttachment) {
	c.vaQueue.loops[c.laneOf(va)].Add(va.Name)
}

// requeue resets a VolumeAttachment's backoff in every lane and queues it
// in its lane: a change that may end its failures deserves a prompt retry.
func (c *Controller) requeue(va *storagev1.VolumeAttachment) {
	c.vaQueue.Forget(va.Name)
	c.enqueue(va)
}

// vaLanes are the VolumeAttachment queues. A key can sit in two of them
// (it was queued, then its lane changed); keyLocks keeps two workers from
// syncing it at once, as one workqueue would.
type vaLanes struct {
	loops [laneCount]*keyloop.Loop[string]
	locks keyLocks
}

// Forget resets a key's backoff in every lane.
func (q *vaLanes) Forget(key string) {
	for _, l := range q.loops {
		l.Forget(key)
	}
}

// NumRequeues sums a key's failures since its last success over the lanes.
func (q *vaLanes) NumRequeues(key string) int {
	n := 0
	for _, l := range q.loops {
		n += l.NumRequeues(key)
	}
	return n
}

// Len returns the number of queued keys in all lanes.
func (q *vaLanes) Len() int {
	n := 0
	for _, l := range q.loops {
		n += l.Len()
	}
	return n
}

// Drain empties every lane (see keyloop.Loop.Drain).
func (q *vaLanes) Drain() []string {
	var keys []string
	for _, l := range q.loops {
		keys = append(keys, l.Drain()...)
	}
	return keys
}

// ShutDown stops every lane.
func (q *vaLanes) ShutDown() {
	for _, l := range q.loops {
		l.ShutDown()
	}
}

// laneKey carries a sync's lane in its context.
type laneKey struct{}

// client is the client a sync writes (and reads fresh) through: failover
// work has a budget of its own, so that a storm of routine attaches and
// detaches on --kube-api-qps cannot delay it.
func (c *Controller) client(ctx context.Context) kubernetes.Interface {
	if l, ok := ctx.Value(laneKey{}).(lane); ok && l == laneFailover {
		return c.cfg.FailoverClient
	}
	return c.cfg.Client
}

// keyLocks holds one lock per key in use.
type keyLocks struct {
	mu   sync.Mutex
	held map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	refs int
}

// lock takes key's lock and returns its release.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*keyLock{}
	}
	l := k.held[key]
	if l == nil {
		l = &keyLock{}
		k.held[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}

// volumeMoves remembers, per PersistentVolume, when its attachment was
// last detached with a fence. Losing it (restart) only costs the
// replacement's attach its priority.
type volumeMoves struct {
	mu sync.Mutex
	at map[string]time.Time
}

// moved records a fenced detach of pv at now and forgets old ones.
func (m *volumeMoves) moved(pv string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == nil {
		m.at = map[string]time.Time{}
	}
	for k, t := range m.at {
		if now.Sub(t) >= movedFor {
			delete(m.at, k)
		}
	}
	m.at[pv] = now
}

// recent reports whether pv was detached with a fence within movedFor.
func (m *volumeMoves) recent(pv string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[pv]
	return ok && now.Sub(t) < movedFor
}
