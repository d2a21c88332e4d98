package bench

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// seenPod and seenVA describe what a test's recorder saw, with times as
// seconds after base (0: never).
type seenPod struct {
	uid                types.UID
	name, node         string
	scheduled, running float64 // 0: never
	deleted            float64 // 0: never
}

type seenVA struct {
	uid                     types.UID
	pv, node                string
	created, attached, gone float64 // 0: never
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }

// recorderWith builds a recorder holding what pods and vas say was seen.
func recorderWith(pods []seenPod, vas []seenVA) *recorder {
	r := &recorder{
		podScheduled: map[types.UID]podSeen{}, podRunning: map[types.UID]podSeen{}, podDeleted: map[types.UID]time.Time{},
		vaCreated: map[types.UID]vaSeen{}, vaAttached: map[types.UID]vaSeen{}, vaDeleted: map[types.UID]time.Time{},
	}
	for _, p := range pods {
		if p.scheduled > 0 {
			r.podScheduled[p.uid] = podSeen{Name: p.name, Node: p.node, At: at(p.scheduled)}
		}
		if p.running > 0 {
			r.podRunning[p.uid] = podSeen{Name: p.name, Node: p.node, At: at(p.running)}
		}
		if p.deleted > 0 {
			r.podDeleted[p.uid] = at(p.deleted)
		}
	}
	for _, v := range vas {
		if v.created > 0 {
			r.vaCreated[v.uid] = vaSeen{PV: v.pv, Node: v.node, At: at(v.created)}
		}
		if v.attached > 0 {
			r.vaAttached[v.uid] = vaSeen{PV: v.pv, Node: v.node, At: at(v.attached)}
		}
		if v.gone > 0 {
			r.vaDeleted[v.uid] = at(v.gone)
		}
	}
	return r
}

func TestRecorderProgress(t *testing.T) {
	victim := victimState{
		Node: "node-a",
		Pods: map[string]types.UID{"db-0": "old-0", "db-3": "old-3"},
		PVs:  map[string]string{"db-0": "pv-0", "db-3": "pv-3"},
		VAs:  []types.UID{"va-old-0", "va-old-3"},
	}
	oldPods := []seenPod{
		{uid: "old-0", name: "db-0", node: "node-a", scheduled: 0.1, running: 0.2, deleted: 1},
		{uid: "old-3", name: "db-3", node: "node-a", scheduled: 0.1, running: 0.2, deleted: 2},
	}
	oldVAs := []seenVA{
		{uid: "va-old-0", pv: "pv-0", node: "node-a", created: 0.1, attached: 0.15, gone: 1.5},
		{uid: "va-old-3", pv: "pv-3", node: "node-a", created: 0.1, attached: 0.15, gone: 2.5},
	}
	for _, tc := range []struct {
		name string
		pods []seenPod
		vas  []seenVA
		want progress
	}{
		{
			name: "nothing moved yet",
			pods: oldPods, vas: oldVAs,
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5)},
		},
		{
			name: "one replacement still missing",
			pods: append(oldPods, seenPod{uid: "new-0", name: "db-0", node: "node-b", scheduled: 3, running: 4}),
			vas:  append(oldVAs, seenVA{uid: "va-new-0", pv: "pv-0", node: "node-b", created: 3.2, attached: 3.5}),
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5)},
		},
		{
			name: "a replacement Running on the lost node does not count",
			pods: append(oldPods,
				seenPod{uid: "new-0", name: "db-0", node: "node-b", scheduled: 3, running: 4},
				seenPod{uid: "new-3", name: "db-3", node: "node-a", scheduled: 3, running: 4}),
			vas: append(oldVAs,
				seenVA{uid: "va-new-0", pv: "pv-0", node: "node-b", created: 3.2, attached: 3.5},
				seenVA{uid: "va-new-3", pv: "pv-3", node: "node-a", created: 3.2, attached: 3.5}),
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5)},
		},
		{
			name: "Running but the volume on another node: not ready",
			pods: append(oldPods,
				seenPod{uid: "new-0", name: "db-0", node: "node-b", scheduled: 3, running: 4},
				seenPod{uid: "new-3", name: "db-3", node: "node-c", scheduled: 3, running: 4}),
			vas: append(oldVAs,
				seenVA{uid: "va-new-0", pv: "pv-0", node: "node-b", created: 3.2, attached: 3.5},
				seenVA{uid: "va-new-3", pv: "pv-3", node: "node-b", created: 3.2, attached: 3.5}),
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5)},
		},
		{
			name: "a replacement deleted and replaced again: the live one counts",
			pods: append(oldPods,
				seenPod{uid: "new-0", name: "db-0", node: "node-b", scheduled: 3, running: 4},
				seenPod{uid: "gone-3", name: "db-3", node: "node-b", scheduled: 2.8, deleted: 3},
				seenPod{uid: "new-3", name: "db-3", node: "node-c", scheduled: 3.1, running: 3.9}),
			vas: append(oldVAs,
				seenVA{uid: "va-new-0", pv: "pv-0", node: "node-b", created: 3.2, attached: 3.5},
				seenVA{uid: "va-new-3", pv: "pv-3", node: "node-c", created: 3.3, attached: 4.5}),
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5), Scheduled: at(3.1), VAsCreated: at(3.3),
				VAsAttached: at(4.5), Running: at(4), Replacements: at(4.5)},
		},
		{
			name: "all moved: each stage is its latest pod, ready is the later of Running and attached",
			pods: append(oldPods,
				seenPod{uid: "new-0", name: "db-0", node: "node-b", scheduled: 3, running: 4},
				seenPod{uid: "new-3", name: "db-3", node: "node-c", scheduled: 3.1, running: 3.9}),
			vas: append(oldVAs,
				seenVA{uid: "va-new-0", pv: "pv-0", node: "node-b", created: 3.2, attached: 3.5},
				seenVA{uid: "va-new-3", pv: "pv-3", node: "node-c", created: 3.3, attached: 4.5}),
			want: progress{PodsDeleted: at(2), VAsGone: at(2.5), Scheduled: at(3.1), VAsCreated: at(3.3),
				VAsAttached: at(4.5), Running: at(4), Replacements: at(4.5)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := recorderWith(tc.pods, tc.vas).progress(victim)
			if got != tc.want {
				t.Fatalf("progress =\n  %+v\nwant\n  %+v", got, tc.want)
			}
			if got.done() != !tc.want.Replacements.IsZero() {
				t.Fatalf("done() = %t with Replacements %v", got.done(), got.Replacements)
			}
		})
	}
}

func TestLastDeletedWaitsForEveryUID(t *testing.T) {
	seen := map[types.UID]time.Time{"a": at(1), "b": at(3)}
	if _, ok := lastDeleted(seen, []types.UID{"a", "c"}); ok {
		t.Fatal("lastDeleted reported done while c was never deleted")
	}
	if got, ok := lastDeleted(seen, []types.UID{"a", "b"}); !ok || !got.Equal(at(3)) {
		t.Fatalf("lastDeleted = %v, %t; want %v, true", got, ok, at(3))
	}
}
