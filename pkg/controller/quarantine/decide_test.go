package quarantine

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

func safeVol(name string) podvolumes.Volume {
	return podvolumes.Volume{Name: name, Kind: podvolumes.KindCSI, Driver: "safe.example", Handle: "h-" + name, SafeDetach: true}
}

// served is the evidence that a fence-capable fenceline-attacher serves
// safe.example.
var served = Attachers{"safe.example": {Serving: true}}

// keepNone keeps no volume listed for its own sake (none is ReadWriteMany).
func keepNone(v1.UniqueVolumeName) string { return "" }

func TestDecidePod(t *testing.T) {
	t0 := testobj.Epoch
	delay := 40 * time.Second
	late := t0.Add(delay + time.Second)
	quarantined := testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
	down := testobj.NotReadySince(t0)
	stuck := testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0))

	tests := []struct {
		name    string
		node    *v1.Node
		pod     *v1.Pod
		vols    []podvolumes.Volume
		now     time.Time
		want    Action
		wantWhy string
	}{
		{"safe-detach pod on quarantined node", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{safeVol("data")}, late, Delete, "safe-detach"},
		{"Ready=Unknown counts", testobj.Node("n1", testobj.UnknownSince(t0), quarantined), stuck, []podvolumes.Volume{safeVol("data")}, late, Delete, ""},
		{"taint before delete", testobj.Node("n1", down), stuck, []podvolumes.Volume{safeVol("data")}, late, TaintFirst, "quarantined before"},
		{"our key with another effect is no quarantine: taint first", testobj.Node("n1", down, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoExecute)), stuck, []podvolumes.Volume{safeVol("data")}, late, TaintFirst, "quarantined before"},
		{"delay not yet expired", testobj.Node("n1", down), stuck, []podvolumes.Volume{safeVol("data")}, t0.Add(10 * time.Second), Wait, "quarantine after"},
		{"Ready node: never", testobj.Node("n1", testobj.ReadySince(t0), quarantined), stuck, []podvolumes.Volume{safeVol("data")}, late, Skip, "Ready"},
		{"pod not terminating", testobj.Node("n1", down, quarantined), testobj.Pod("ns", "p", testobj.OnNode("n1")), []podvolumes.Volume{safeVol("data")}, late, Skip, "not terminating"},
		{"pod gone", testobj.Node("n1", down, quarantined), nil, nil, late, Skip, "gone"},
		{"node deleted", nil, stuck, []podvolumes.Volume{safeVol("data")}, late, Skip, "does not exist"},
		{"already force-deleted", testobj.Node("n1", down, quarantined), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.ForceDeleted(t0)), []podvolumes.Volume{safeVol("data")}, late, Skip, "already"},
		{"emptyDir and configMap are harmless", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{safeVol("data"), {Name: "tmp", Kind: podvolumes.KindHarmless}}, late, Delete, ""},
		{"mixed: one driver not safe-detach", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{safeVol("data"), {Name: "logs", Kind: podvolumes.KindCSI, Driver: "other.example"}}, late, Refuse, "not annotated"},
		{"RWX volume", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{func() podvolumes.Volume { v := safeVol("shared"); v.RWX = true; return v }()}, late, Refuse, "ReadWriteMany"},
		{"hostPath", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{safeVol("data"), {Name: "h", Kind: podvolumes.KindNodeLocal, Detail: "hostPath"}}, late, Refuse, "node-local"},
		{"local PV", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{{Name: "l", Kind: podvolumes.KindNodeLocal, Detail: "PV x is node-local"}}, late, Refuse, "node-local"},
		{"inline CSI volume", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{safeVol("data"), {Name: "i", Kind: podvolumes.KindInlineCSI, Driver: "safe.example"}}, late, Refuse, "inline"},
		{"unbound claim", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{{Name: "u", Kind: podvolumes.KindUnresolved, Detail: "PVC ns/u is not bound"}}, late, Refuse, "not bound"},
		{"in-tree volume", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{{Name: "nfs", Kind: podvolumes.KindOther, Detail: "PV nfs is not a CSI volume"}}, late, Refuse, "not a CSI volume"},
		{"no volumes at all", testobj.Node("n1", down, quarantined), stuck, nil, late, Refuse, "no volume from a safe-detach"},
		{"only harmless volumes", testobj.Node("n1", down, quarantined), stuck, []podvolumes.Volume{{Name: "tmp", Kind: podvolumes.KindHarmless}}, late, Refuse, "no volume from a safe-detach"},
		{"mirror pod with safe volumes is deleted, as upstream", testobj.Node("n1", down, quarantined), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0), testobj.Mirror()), []podvolumes.Volume{safeVol("data")}, late, Delete, ""},
		{"DaemonSet pod with safe volumes is deleted", testobj.Node("n1", down, quarantined), testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0), testobj.OwnedBy("DaemonSet", "ds")), []podvolumes.Volume{safeVol("data")}, late, Delete, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecidePod(tc.node, tc.pod, tc.vols, served, tc.now, delay)
			if got.Action != tc.want {
				t.Fatalf("DecidePod() = %+v, want action %v", got, tc.want)
			}
			if got.Why == "" || !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("Why = %q, want it to mention %q", got.Why, tc.wantWhy)
			}
			if tc.want == Wait && (got.After <= 0 || got.After > delay) {
				t.Errorf("After = %s, want in (0, %s]", got.After, delay)
			}
		})
	}
}

func TestDecideUntaint(t *testing.T) {
	t0 := testobj.Epoch
	lift := 10 * time.Second
	later := t0.Add(lift + time.Second)
	quarantined := testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
	tests := []struct {
		name         string
		node         *v1.Node
		vas, stale   int
		now          time.Time
		want         bool
		wantWaitSome bool
	}{
		{"Ready long enough, no safe-detach VA, cleaned up", testobj.Node("n1", testobj.ReadySince(t0), quarantined), 0, 0, later, true, false},
		{"just Ready: wait for the kubelet's report", testobj.Node("n1", testobj.ReadySince(t0), quarantined), 0, 0, t0.Add(time.Second), false, true},
		{"Ready, VA left", testobj.Node("n1", testobj.ReadySince(t0), quarantined), 1, 0, later, false, false},
		{"Ready, kubelet still lists a fenced volume", testobj.Node("n1", testobj.ReadySince(t0), quarantined), 0, 1, later, false, false},
		{"not Ready", testobj.Node("n1", testobj.NotReadySince(t0), quarantined), 0, 0, later, false, false},
		{"not quarantined", testobj.Node("n1", testobj.ReadySince(t0)), 0, 0, later, false, false},
		{"taint with our key but another effect is not ours", testobj.Node("n1", testobj.ReadySince(t0), testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoExecute)), 0, 0, later, false, false},
		{"node deleted", nil, 0, 0, later, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideUntaint(tc.node, tc.vas, tc.stale, tc.now, lift)
			if got.Untaint != tc.want || got.Why == "" || (got.After > 0) != tc.wantWaitSome {
				t.Errorf("DecideUntaint() = %+v, want Untaint=%v, wait=%v, with a reason", got, tc.want, tc.wantWaitSome)
			}
		})
	}
}

func TestVolumesToRelease(t *testing.T) {
	t0 := testobj.Epoch
	delay := 40 * time.Second
	late := t0.Add(delay)
	quarantined := testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
	a := nodeutil.CSIUniqueVolumeName("safe.example", "a")
	b := nodeutil.CSIUniqueVolumeName("safe.example", "b")
	other := nodeutil.CSIUniqueVolumeName("other.example", "c")
	intree := v1.UniqueVolumeName("kubernetes.io/iscsi/x")
	safe := func(d string) bool { return d == "safe.example" }

	tests := []struct {
		name  string
		node  *v1.Node
		inUse []v1.UniqueVolumeName
		now   time.Time
		want  []v1.UniqueVolumeName
	}{
		{"unused safe volumes go", testobj.Node("n1", testobj.NotReadySince(t0), quarantined, testobj.VolumesInUse(a, b, other, intree)), nil, late, []v1.UniqueVolumeName{a, b}},
		{"volume still used by a live pod stays", testobj.Node("n1", testobj.NotReadySince(t0), quarantined, testobj.VolumesInUse(a, b)), []v1.UniqueVolumeName{b}, late, []v1.UniqueVolumeName{a}},
		{"leftover taint, short NotReady blip: nothing before the delay", testobj.Node("n1", testobj.NotReadySince(t0), quarantined, testobj.VolumesInUse(a)), nil, t0.Add(2 * time.Second), nil},
		{"not quarantined: nothing", testobj.Node("n1", testobj.NotReadySince(t0), testobj.VolumesInUse(a)), nil, late, nil},
		{"our key with another effect: not quarantined", testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.QuarantineTaint, v1.TaintEffectPreferNoSchedule), testobj.VolumesInUse(a)), nil, late, nil},
		{"Ready node: nothing, its kubelet owns the list", testobj.Node("n1", testobj.ReadySince(t0), quarantined, testobj.VolumesInUse(a)), nil, late, nil},
		{"node deleted", nil, nil, late, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inUse := map[v1.UniqueVolumeName]bool{}
			for _, v := range tc.inUse {
				inUse[v] = true
			}
			got := VolumesToRelease(tc.node, safe, served, keepNone, inUse, tc.now, delay)
			if !slices.Equal(got.Volumes, tc.want) || got.Why == "" || got.Withheld != "" {
				t.Errorf("VolumesToRelease() = %+v, want %v with a reason and nothing withheld", got, tc.want)
			}
		})
	}
	// A returning kubelet's stale entries are what UnusedSafeVolumes finds
	// on a Ready node (the lift waits for them to go).
	ready := testobj.Node("n1", testobj.ReadySince(t0), quarantined, testobj.VolumesInUse(a, b, other))
	if got := UnusedSafeVolumes(ready, safe, map[v1.UniqueVolumeName]bool{b: true}); !slices.Equal(got, []v1.UniqueVolumeName{a}) {
		t.Errorf("UnusedSafeVolumes() = %v, want [%s]", got, a)
	}
}

func TestReleasedVAs(t *testing.T) {
	safe := func(d string) bool { return d == "safe.example" }
	released := testobj.VA("va-a", "safe.example", "pv-a", "n1")
	stayed := testobj.VA("va-b", "safe.example", "pv-b", "n1")
	plain := testobj.VA("va-c", "other.example", "pv-c", "n1")
	inline := testobj.VA("va-d", "safe.example", "", "n1")
	inline.Spec.Source.PersistentVolumeName = nil
	tests := []struct {
		name string
		vas  []*storagev1.VolumeAttachment
		live []string
		want int
	}{
		{"released volume still attached: counted", []*storagev1.VolumeAttachment{released}, nil, 1},
		{"volume of a pod that stayed: not counted", []*storagev1.VolumeAttachment{released, stayed}, []string{"pv-b"}, 1},
		{"only a surviving pod's volume: nothing holds the lift", []*storagev1.VolumeAttachment{stayed}, []string{"pv-b"}, 0},
		{"driver without safe detach: not ours", []*storagev1.VolumeAttachment{plain}, nil, 0},
		{"no PV name: cannot be matched to a pod, counted", []*storagev1.VolumeAttachment{inline}, nil, 1},
		{"none", nil, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live := map[string]bool{}
			for _, pv := range tc.live {
				live[pv] = true
			}
			if got := ReleasedVAs(tc.vas, safe, live); got != tc.want {
				t.Errorf("ReleasedVAs() = %d, want %d", got, tc.want)
			}
		})
	}
}
