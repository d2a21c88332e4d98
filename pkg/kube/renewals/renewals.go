// Package renewals tells when a Lease was last seen renewed, on the
// observer's own clock. spec.renewTime is written with the clock of the
// machine that renews the Lease (a kubelet, a fenceline-attacher); a
// decision that compared it with the observer's clock would fence a
// healthy node whose clock runs behind, or trust a dead attacher whose
// clock runs ahead. So renewTime serves here only as a change marker, as
// kube-controller-manager's node lifecycle controller uses it: the time
// that counts is when the observer saw it change.
//
// The observed time is never earlier than the real renewal (the observer
// sees a write after it happens), and later by the observer's watch delay.
// That errs towards a node looking alive, the safe side for detection. A
// heartbeat's freshness (evidence to act on) can outlast the real one by
// the same delay: a fresh read at write time catches a renewal the watch
// has not delivered, not the delay of one it did. The heartbeat's
// leaseDurationSeconds is the bound, and it must leave room for that delay.
package renewals

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Observation is what the observer knows of one Lease's renewals.
type Observation struct {
	// UID, RenewTime and Holder identify the renewal last seen: a change
	// of any of them is a renewal. RenewTime is the writer's clock and is
	// never compared with the observer's.
	UID       types.UID
	RenewTime time.Time
	Holder    string
	// ObservedAt is when, on the observer's clock, the current renewal
	// was first seen.
	ObservedAt time.Time
	// Renewed is true when ObservedAt is when a change was seen (or the
	// Lease was seen created). It is false for a Lease first seen in the
	// observer's initial list: that renewal may be arbitrarily old, so it
	// proves nothing about the writer being alive now.
	Renewed bool
}

// Next is the single statement of how an observation moves on when the
// observer sees lease at now. prev is the observation so far (known false
// when there is none); initial says the Lease comes from the observer's
// first list, not from a watch event.
//
//   - the first sight of a Lease counts as observed now: a restarted
//     observer never makes a Lease look older than it did before, so a
//     node that was already silent is judged silent from the restart on;
//     from the initial list it is not Renewed (see Observation.Renewed),
//     a Lease created while the observer watches is;
//   - a change of renewTime (either way: a clock stepped back still
//     renews), holder or UID (a recreated Lease) is a renewal observed now;
//   - anything else (a resync, a label edit) keeps the observation, so
//     that writes other than renewals do not refresh it;
//   - a clock of the observer's that went backwards never moves
//     ObservedAt back.
func Next(prev Observation, known bool, lease *coordinationv1.Lease, now time.Time, initial bool) Observation {
	cur := Observation{UID: lease.UID, Holder: holder(lease), RenewTime: renewTime(lease)}
	switch {
	case !known:
		cur.ObservedAt, cur.Renewed = now, !initial
		return cur
	case prev.UID == cur.UID && prev.Holder == cur.Holder && prev.RenewTime.Equal(cur.RenewTime):
		return prev
	}
	cur.ObservedAt, cur.Renewed = now, true
	if now.Before(prev.ObservedAt) {
		cur.ObservedAt = prev.ObservedAt
	}
	return cur
}

func renewTime(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Tracker keeps an Observation per Lease (namespace/name), fed by an
// informer's event handler (Handler) and by fresh reads (Observe).
type Tracker struct {
	now func() time.Time
	mu  sync.Mutex
	obs map[string]Observation
}

// NewTracker returns a Tracker on the clock now.
func NewTracker(now func() time.Time) *Tracker {
	return &Tracker{now: now, obs: map[string]Observation{}}
}

// The Tracker is a cache.ResourceEventHandler of a Lease informer: add it
// (or call its methods from a handler of one's own, before acting on the
// event) before the informer starts, so that the initial list is told
// apart from later creations.
var _ cache.ResourceEventHandler = (*Tracker)(nil)

// OnAdd observes a Lease listed (initial) or created.
func (t *Tracker) OnAdd(obj any, initial bool) { t.seen(obj, initial) }

// OnUpdate observes a Lease's update.
func (t *Tracker) OnUpdate(_, obj any) { t.seen(obj, false) }

// OnDelete forgets a Lease: one recreated under its name is another.
func (t *Tracker) OnDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		t.mu.Lock()
		delete(t.obs, key(l))
		t.mu.Unlock()
	}
}

func (t *Tracker) seen(obj any, initial bool) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		t.observe(l, initial)
	}
}

// Observe records lease as seen now (a fresh read, or the cached copy a
// decision uses) and returns its observation. A Lease the Tracker has not
// seen yet counts as first seen now, not Renewed.
func (t *Tracker) Observe(lease *coordinationv1.Lease) Observation {
	return t.observe(lease, true)
}

func (t *Tracker) observe(lease *coordinationv1.Lease, initial bool) Observation {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := key(lease)
	prev, known := t.obs[k]
	cur := Next(prev, known, lease, t.now(), initial)
	t.obs[k] = cur
	return cur
}

// Seed records that lease's current renewal was observed at at, as if the
// Tracker had watched it happen. It is for tests that start with a
// history.
func (t *Tracker) Seed(lease *coordinationv1.Lease, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := Next(Observation{}, false, lease, at, false)
	t.obs[key(lease)] = o
}

func key(l *coordinationv1.Lease) string { return l.Namespace + "/" + l.Name }
