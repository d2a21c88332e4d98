package forceeviction

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestDecidePod(t *testing.T) {
	t0 := testobj.Epoch
	grace := 50 * time.Second
	now := t0.Add(2 * grace)
	fe := testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)
	down := testobj.NotReadySince(t0)
	running := testobj.Pod("ns", "p", testobj.OnNode("n1"))
	stale := testobj.Lease("n1", t0)
	fresh := testobj.Lease("n1", now.Add(-5*time.Second))

	tests := []struct {
		name    string
		node    *v1.Node
		pod     *v1.Pod
		lease   *coordinationv1.Lease
		want    bool
		wantWhy string
	}{
		{"running pod on tainted NotReady node, Lease stale", testobj.Node("n1", down, fe), running, stale, true, "not renewed"},
		{"no Lease at all: no evidence of life, and the reason says so", testobj.Node("n1", down, fe), running, nil, true, "no node Lease"},
		{"NotReady but the kubelet renews its Lease: alive, never", testobj.Node("n1", down, fe), running, fresh, false, "renewed its node Lease"},
		{"terminating pod too", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0)), stale, true, ""},
		{"Ready node: never", testobj.Node("n1", testobj.ReadySince(t0), fe), running, stale, false, "Ready"},
		{"no taint", testobj.Node("n1", down), running, stale, false, "no force-eviction taint"},
		{"taint key with another effect is not a request", testobj.Node("n1", down, testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoSchedule)), running, stale, false, "NoExecute"},
		{"pod tolerates the taint", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate(names.ForceEvictionTaint)), stale, false, "tolerates"},
		{"pod tolerates everything", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate("")), stale, false, "tolerates"},
		{"toleration of another key", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate("other")), stale, true, ""},
		{"pod gone", testobj.Node("n1", down, fe), nil, stale, false, "gone"},
		{"node deleted", nil, running, stale, false, "does not exist"},
		{"already force-deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.ForceDeleted(t0)), stale, false, "already"},
		{"mirror pod is deleted, as upstream pod GC does", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Mirror()), stale, true, ""},
		{"DaemonSet pod without toleration is deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.OwnedBy("DaemonSet", "ds")), stale, true, ""},
		{"pod with mixed and RWX volumes is deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Claim("a", "a"), testobj.HostPath("h", "/")), stale, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecidePod(tc.node, tc.pod, tc.lease, now, grace)
			if got.Delete != tc.want {
				t.Fatalf("DecidePod() = %+v, want Delete=%v", got, tc.want)
			}
			if got.Why == "" || !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("Why = %q, want it to mention %q", got.Why, tc.wantWhy)
			}
		})
	}
}

func TestKubeletLiveness(t *testing.T) {
	t0 := testobj.Epoch
	grace := 50 * time.Second
	down := testobj.Node("n1", testobj.NotReadySince(t0))
	tests := []struct {
		name      string
		node      *v1.Node
		lease     *coordinationv1.Lease
		alive     bool
		wantAfter time.Duration
	}{
		{"Ready", testobj.Node("n1", testobj.ReadySince(t0)), nil, true, 0},
		{"NotReady, Lease renewed 10s ago", down, testobj.Lease("n1", t0.Add(-10*time.Second)), true, 40 * time.Second},
		{"NotReady, Lease renewed exactly grace ago: stale", down, testobj.Lease("n1", t0.Add(-grace)), false, 0},
		{"NotReady, no Lease", down, nil, false, 0},
		{"NotReady, Lease never renewed", down, &coordinationv1.Lease{}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := KubeletLiveness(tc.node, tc.lease, t0, grace)
			if got.Alive != tc.alive || got.After != tc.wantAfter || got.Why == "" {
				t.Errorf("KubeletLiveness() = %+v, want alive=%v after=%s with a reason", got, tc.alive, tc.wantAfter)
			}
		})
	}
}

func TestDecideNode(t *testing.T) {
	t0 := testobj.Epoch
	grace := 50 * time.Second
	tainted := t0.Add(10 * time.Second) // taint first seen
	fe := testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)
	vol := v1.UniqueVolumeName("kubernetes.io/csi/d^h")
	down := testobj.NotReadySince(t0)
	backAt := tainted.Add(5 * time.Second)

	type want struct{ untaint, release, clear, wait bool }
	tests := []struct {
		name string
		s    NodeState
		now  time.Time
		want want
	}{
		// Scenario 3: the kubelet is back before anything was evicted.
		{"node back (Ready after the taint) before the eviction started: untaint, delete nothing",
			NodeState{Node: testobj.Node("n1", testobj.ReadySince(tainted.Add(time.Second)), fe), Remaining: 3}, tainted.Add(2 * time.Second), want{untaint: true}},
		// Scenario 1: back mid-eviction: the taint stays for the evicted pods' detaches.
		{"node back mid-eviction, an evicted pod's VA remains: keep the taint",
			NodeState{Node: testobj.Node("n1", testobj.ReadySince(backAt), fe, testobj.VolumesInUse(vol)), Remaining: 1, VAs: 2, Evicted: true, EvictedVAs: 1}, backAt.Add(time.Second), want{}},
		{"node back mid-eviction, evicted pods' VAs gone (others remain): untaint and forget",
			NodeState{Node: testobj.Node("n1", testobj.ReadySince(backAt), fe), Remaining: 1, VAs: 1, Evicted: true}, backAt.Add(time.Second), want{untaint: true, clear: true}},
		{"NotReady but the Lease renews: wait, no eviction, no untaint",
			NodeState{Node: testobj.Node("n1", down, fe), Lease: testobj.Lease("n1", tainted), Remaining: 2}, tainted.Add(time.Second), want{wait: true}},
		{"Lease renews after the eviction started, VA of an evicted pod left: keep",
			NodeState{Node: testobj.Node("n1", down, fe), Lease: testobj.Lease("n1", tainted), Evicted: true, EvictedVAs: 1, VAs: 1}, tainted.Add(time.Second), want{}},
		{"all pods gone, volumes listed: release them",
			NodeState{Node: testobj.Node("n1", down, fe, testobj.VolumesInUse(vol), testobj.VolumesAttached(vol)), VAs: 1}, tainted, want{release: true}},
		// A node tainted right after it died still looks Ready for a while.
		{"still Ready since before the taint, within the grace: wait",
			NodeState{Node: testobj.Node("n1", testobj.ReadySince(t0), fe), Remaining: 3}, tainted.Add(5 * time.Second), want{wait: true}},
		{"still Ready since before the taint, grace over: kubelet alive, untaint",
			NodeState{Node: testobj.Node("n1", testobj.ReadySince(t0), fe), Remaining: 3}, tainted.Add(grace), want{untaint: true}},
		{"all pods gone, only volumesAttached left: release",
			NodeState{Node: testobj.Node("n1", down, fe, testobj.VolumesAttached(vol))}, tainted, want{release: true}},
		{"all pods gone, VA still there: keep taint for the attacher",
			NodeState{Node: testobj.Node("n1", down, fe), VAs: 1, Evicted: true, EvictedVAs: 1}, tainted, want{}},
		{"all pods and volumes gone: untaint and forget",
			NodeState{Node: testobj.Node("n1", down, fe), Evicted: true}, tainted, want{untaint: true, clear: true}},
		{"pods remain: keep going", NodeState{Node: testobj.Node("n1", down, fe), Remaining: 2}, tainted, want{}},
		{"taint with another effect: not ours", NodeState{Node: testobj.Node("n1", down, testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoSchedule))}, tainted, want{}},
		{"no taint, record left: forget it", NodeState{Node: testobj.Node("n1", down), Evicted: true}, tainted, want{clear: true}},
		{"no taint: nothing", NodeState{Node: testobj.Node("n1", down)}, tainted, want{}},
		{"node deleted: nothing", NodeState{}, tainted, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.TaintSince = tainted
			got := DecideNode(tc.s, tc.now, grace)
			if (want{got.Untaint, got.ReleaseVolumes, got.ClearRecord, got.After > 0}) != tc.want || got.Why == "" {
				t.Errorf("DecideNode() = %+v, want %+v with a reason", got, tc.want)
			}
		})
	}
}

func TestEvictedRecord(t *testing.T) {
	node := testobj.Node("n1", testobj.Annotation(EvictedVolumesAnnotation, "pv-a"))
	ev := ParseEvicted(node)
	if !ev.Present || len(ev.PVs) != 1 || ev.All {
		t.Fatalf("ParseEvicted() = %+v", ev)
	}
	if _, adds := ev.With([]string{"pv-a"}, false); adds {
		t.Error("adding a recorded PV must change nothing")
	}
	more, adds := ev.With([]string{"pv-b"}, true)
	if !adds || more.String() != "pv-a,pv-b,*" {
		t.Errorf("With() = %q, %v", more.String(), adds)
	}
	if e := ParseEvicted(testobj.Node("n1")); e.Present {
		t.Errorf("no annotation parsed as %+v", e)
	}
	if _, adds := (Evicted{}).With(nil, false); !adds {
		t.Error("a first record, even empty, marks the eviction started")
	}

	va := func(pv string) *storagev1.VolumeAttachment { return testobj.VA("va-"+pv, "d", pv, "n1") }
	vas := []*storagev1.VolumeAttachment{va("pv-a"), va("pv-b"), va("pv-c")}
	noPV := va("x")
	noPV.Spec.Source.PersistentVolumeName = nil
	for _, tc := range []struct {
		name string
		vas  []*storagev1.VolumeAttachment
		e    Evicted
		live []string
		want int
	}{
		{"recorded PV only", vas, Evicted{Present: true, PVs: []string{"pv-a"}}, nil, 1},
		{"unknown volumes: every VA counts", vas, Evicted{Present: true, All: true}, nil, 3},
		{"unknown volumes, but a live pod's VA does not", vas, Evicted{Present: true, All: true}, []string{"pv-c"}, 2},
		{"recorded, but its pod was never deleted (re-check stopped it)", vas, Evicted{Present: true, PVs: []string{"pv-a"}}, []string{"pv-a"}, 0},
		{"VA without a PV name cannot be matched: counts", []*storagev1.VolumeAttachment{noPV}, Evicted{Present: true}, nil, 1},
		{"no record", vas, Evicted{}, nil, 0},
	} {
		live := map[string]bool{}
		for _, pv := range tc.live {
			live[pv] = true
		}
		if got := EvictedVAs(tc.vas, tc.e, live); got != tc.want {
			t.Errorf("%s: EvictedVAs() = %d, want %d", tc.name, got, tc.want)
		}
	}
}
