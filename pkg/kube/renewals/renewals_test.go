package renewals

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
)

func TestNext(t *testing.T) {
	t0 := testobj.Epoch
	now := t0.Add(time.Hour)
	lease := func(renew time.Time, opts ...func(*coordinationv1.Lease)) *coordinationv1.Lease {
		l := testobj.Lease("n1", renew)
		l.UID = "u1"
		for _, o := range opts {
			o(l)
		}
		return l
	}
	held := func(h string) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To(h) }
	}
	labelled := func(l *coordinationv1.Lease) { l.Labels = map[string]string{"x": "y"} }
	recreated := func(l *coordinationv1.Lease) { l.UID = "u2" }
	noRenew := func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil }
	seen := Next(Observation{}, false, lease(t0.Add(-30*time.Second)), t0, false)

	tests := []struct {
		name         string
		prev         Observation
		known        bool
		lease        *coordinationv1.Lease
		initial      bool
		wantObserved time.Time
		wantRenewed  bool
	}{
		{"first sight in the initial list: observed now, not a renewal", Observation{}, false, lease(t0.Add(-time.Hour)), true, now, false},
		{"first sight from a watch (created meanwhile): a renewal now", Observation{}, false, lease(now), false, now, true},
		{"first sight, renewTime in the node's future: observed now all the same", Observation{}, false, lease(now.Add(time.Hour)), true, now, false},
		{"same renewal again (resync): unchanged", seen, true, lease(t0.Add(-30 * time.Second)), false, t0, true},
		{"another write, same renewal (labels): unchanged", seen, true, lease(t0.Add(-30*time.Second), labelled), false, t0, true},
		{"renewTime moved on: renewed now", seen, true, lease(t0.Add(-20 * time.Second)), false, now, true},
		{"renewTime 30 s behind the observer's clock: renewed now, age not counted", seen, true, lease(now.Add(-30 * time.Second)), false, now, true},
		{"renewTime moved back (node clock stepped back): renewed now", seen, true, lease(t0.Add(-time.Hour)), false, now, true},
		{"holder changed, same renewTime: renewed now", seen, true, lease(t0.Add(-30*time.Second), held("other")), false, now, true},
		{"Lease recreated (another UID): renewed now", seen, true, lease(t0.Add(-30*time.Second), recreated), false, now, true},
		{"renewTime removed: a change, renewed now", seen, true, lease(t0, noRenew), false, now, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Next(tc.prev, tc.known, tc.lease, now, tc.initial)
			if !got.ObservedAt.Equal(tc.wantObserved) || got.Renewed != tc.wantRenewed {
				t.Errorf("Next() = %+v, want observed at %s, renewed %v", got, tc.wantObserved, tc.wantRenewed)
			}
		})
	}
	// The observer's clock going backwards never moves the observation back.
	if got := Next(seen, true, lease(t0), t0.Add(-time.Minute), false); !got.ObservedAt.Equal(t0) {
		t.Errorf("observer clock went back: observed at %s, want %s kept", got.ObservedAt, t0)
	}
}

func TestTracker(t *testing.T) {
	now := testobj.Epoch
	tr := NewTracker(func() time.Time { return now })
	l := testobj.Lease("n1", now.Add(-time.Hour))
	h := tr
	h.OnAdd(l, true)
	now = now.Add(10 * time.Second)
	if o := tr.Observe(l); !o.ObservedAt.Equal(testobj.Epoch) || o.Renewed {
		t.Errorf("initial list then a re-read: %+v, want observed at the list, not renewed", o)
	}
	renewed := testobj.Lease("n1", testobj.Epoch.Add(-50*time.Minute))
	h.OnUpdate(l, renewed)
	if o := tr.Observe(renewed); !o.ObservedAt.Equal(now) || !o.Renewed {
		t.Errorf("after a renewal: %+v, want observed at %s", o, now)
	}
	h.OnDelete(renewed)
	now = now.Add(time.Second)
	if o := tr.Observe(renewed); !o.ObservedAt.Equal(now) || o.Renewed {
		t.Errorf("after a delete, a read is a first sight: %+v", o)
	}
	tr.Seed(l, testobj.Epoch.Add(-time.Minute))
	if o := tr.Observe(l); !o.ObservedAt.Equal(testobj.Epoch.Add(-time.Minute)) || !o.Renewed {
		t.Errorf("seeded: %+v", o)
	}
}
