package forceeviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestDecidePod(t *testing.T) {
	t0 := testobj.Epoch
	fe := testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)
	down := testobj.NotReadySince(t0)
	running := testobj.Pod("ns", "p", testobj.OnNode("n1"))

	tests := []struct {
		name    string
		node    *v1.Node
		pod     *v1.Pod
		want    bool
		wantWhy string
	}{
		{"running pod on tainted NotReady node", testobj.Node("n1", down, fe), running, true, "force-eviction"},
		{"terminating pod too", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0)), true, ""},
		{"Ready node: never", testobj.Node("n1", testobj.ReadySince(t0), fe), running, false, "Ready"},
		{"no taint", testobj.Node("n1", down), running, false, "no force-eviction taint"},
		{"pod tolerates the taint", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate(names.ForceEvictionTaint)), false, "tolerates"},
		{"pod tolerates everything", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate("")), false, "tolerates"},
		{"toleration of another key", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Tolerate("other")), true, ""},
		{"pod gone", testobj.Node("n1", down, fe), nil, false, "gone"},
		{"node deleted", nil, running, false, "does not exist"},
		{"already force-deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.ForceDeleted(t0)), false, "already"},
		{"mirror pod is deleted, as upstream pod GC does", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Mirror()), true, ""},
		{"DaemonSet pod without toleration is deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.OwnedBy("DaemonSet", "ds")), true, ""},
		{"pod with mixed and RWX volumes is deleted", testobj.Node("n1", down, fe), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Claim("a", "a"), testobj.HostPath("h", "/")), true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecidePod(tc.node, tc.pod)
			if got.Delete != tc.want {
				t.Fatalf("DecidePod() = %+v, want Delete=%v", got, tc.want)
			}
			if got.Why == "" || !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("Why = %q, want it to mention %q", got.Why, tc.wantWhy)
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

	tests := []struct {
		name             string
		node             *v1.Node
		remaining, vas   int
		now              time.Time
		untaint, release bool
		wait             bool
	}{
		// The proposal's three races with a returning kubelet.
		{"node back (Ready after the taint) before the eviction started: untaint, delete nothing", testobj.Node("n1", testobj.ReadySince(tainted.Add(time.Second)), fe), 3, 0, tainted.Add(2 * time.Second), true, false, false},
		{"node back mid-eviction: stop and untaint", testobj.Node("n1", testobj.ReadySince(tainted.Add(5*time.Second)), fe, testobj.VolumesInUse(vol)), 1, 1, tainted.Add(6 * time.Second), true, false, false},
		{"all pods gone, volumes listed: release them", testobj.Node("n1", testobj.NotReadySince(t0), fe, testobj.VolumesInUse(vol), testobj.VolumesAttached(vol)), 0, 1, tainted, false, true, false},
		// A node tainted right after it died still looks Ready for a while.
		{"still Ready since before the taint, within the grace: wait", testobj.Node("n1", testobj.ReadySince(t0), fe), 3, 0, tainted.Add(5 * time.Second), false, false, true},
		{"still Ready since before the taint, grace over: kubelet alive, untaint", testobj.Node("n1", testobj.ReadySince(t0), fe), 3, 0, tainted.Add(grace), true, false, false},
		{"all pods gone, only volumesAttached left: release", testobj.Node("n1", testobj.NotReadySince(t0), fe, testobj.VolumesAttached(vol)), 0, 0, tainted, false, true, false},
		{"all pods gone, VA still there: keep taint for the attacher", testobj.Node("n1", testobj.NotReadySince(t0), fe), 0, 1, tainted, false, false, false},
		{"all pods and volumes gone: untaint", testobj.Node("n1", testobj.NotReadySince(t0), fe), 0, 0, tainted, true, false, false},
		{"pods remain: keep going", testobj.Node("n1", testobj.NotReadySince(t0), fe), 2, 0, tainted, false, false, false},
		{"no taint: nothing", testobj.Node("n1", testobj.NotReadySince(t0)), 0, 0, tainted, false, false, false},
		{"node deleted: nothing", nil, 0, 0, tainted, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideNode(tc.node, tc.remaining, tc.vas, tainted, tc.now, grace)
			if got.Untaint != tc.untaint || got.ReleaseVolumes != tc.release || (got.After > 0) != tc.wait || got.Why == "" {
				t.Errorf("DecideNode() = %+v, want Untaint=%v ReleaseVolumes=%v wait=%v with a reason", got, tc.untaint, tc.release, tc.wait)
			}
		})
	}
}
