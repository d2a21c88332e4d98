package quarantine

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// evidenceCase is the attacher evidence for safe.example, from its
// heartbeat Leases and CSIDriver by the rule cutoff.AttacherServes.
type evidenceCase struct {
	name      string
	attachers Attachers
	wantWhy   string // "" means served
}

func evidenceCases(now time.Time) []evidenceCase {
	const driver = "safe.example"
	safe := testobj.CSIDriver(driver, map[string]string{names.SafeDetachAnnotation: "true"})
	fresh := testobj.Heartbeat("kube-system", driver, now)
	of := func(leases []*coordinationv1.Lease, d *storagev1.CSIDriver) Attachers {
		return Attachers{driver: cutoff.AttacherServes(driver, cutoff.Snapshot(leases, now), d, now)}
	}
	return []evidenceCase{
		{"fresh heartbeat of a fencing attacher", of([]*coordinationv1.Lease{fresh}, safe), ""},
		{"no heartbeat", of(nil, safe), "no fenceline-attacher heartbeat Lease"},
		{"stale heartbeat", of([]*coordinationv1.Lease{testobj.Heartbeat("kube-system", driver, now.Add(-time.Minute), testobj.LeaseDuration(15*time.Second))}, safe), "stale"},
		{"heartbeat without UNPUBLISH_FENCE", of([]*coordinationv1.Lease{testobj.Heartbeat("kube-system", driver, now, testobj.NoUnpublishFence())}, safe), "UNPUBLISH_FENCE"},
		{"attachRequired: false", of([]*coordinationv1.Lease{fresh}, testobj.AttachRequired(safe.DeepCopy(), false)), "attachRequired: false"},
		{"CSIDriver gone", of([]*coordinationv1.Lease{fresh}, nil), "not found"},
		{"driver not looked up", Attachers{}, "no evidence looked up"},
		{"nil evidence", nil, "no evidence looked up"},
	}
}

// TestDecidePodNeedsAttacherEvidence: quarantine force-deletes, or taints
// for, only pods whose every safe-detach driver is served by a
// fence-capable fenceline-attacher on positive, fresh evidence.
func TestDecidePodNeedsAttacherEvidence(t *testing.T) {
	t0 := testobj.Epoch
	delay := 40 * time.Second
	late := t0.Add(delay + time.Second)
	stuck := testobj.Pod("ns", "p", testobj.OnNode("n1"), testobj.Terminating(t0))
	quarantined := testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule))
	notYet := testobj.Node("n1", testobj.NotReadySince(t0))
	for _, tc := range evidenceCases(late) {
		t.Run(tc.name, func(t *testing.T) {
			for _, node := range []*v1.Node{quarantined, notYet} {
				want := Refuse
				switch {
				case tc.wantWhy == "" && node == quarantined:
					want = Delete
				case tc.wantWhy == "":
					want = TaintFirst
				}
				// Two volumes of one driver: the missing evidence is told once.
				got := DecidePod(node, stuck, []podvolumes.Volume{safeVol("a"), safeVol("b")}, tc.attachers, late, delay)
				if got.Action != want || !strings.Contains(got.Why, tc.wantWhy) {
					t.Errorf("quarantined=%v: DecidePod() = %+v, want action %v mentioning %q", node == quarantined, got, want, tc.wantWhy)
				}
				if tc.wantWhy != "" && strings.Count(got.Why, tc.wantWhy) != 1 {
					t.Errorf("Why = %q, want the missing evidence once", got.Why)
				}
			}
		})
	}
	// A volume refused for its own sake is still reported as such, and a
	// driver without the opt-in needs no evidence to be refused.
	rwx := safeVol("shared")
	rwx.RWX = true
	if got := DecidePod(quarantined, stuck, []podvolumes.Volume{rwx}, served, late, delay); got.Action != Refuse || !strings.Contains(got.Why, "ReadWriteMany") {
		t.Errorf("RWX volume of a served driver: %+v, want a refusal naming ReadWriteMany", got)
	}
}

// TestVolumesToReleaseNeedsAttacherEvidence: only volumes of drivers with
// positive, fresh evidence are released; the rest are withheld, and why.
func TestVolumesToReleaseNeedsAttacherEvidence(t *testing.T) {
	t0 := testobj.Epoch
	delay := 40 * time.Second
	late := t0.Add(delay)
	a := nodeutil.CSIUniqueVolumeName("safe.example", "a")
	b := nodeutil.CSIUniqueVolumeName("also-safe.example", "b")
	node := testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule), testobj.VolumesInUse(a, b))
	safe := func(string) bool { return true }
	for _, tc := range evidenceCases(late) {
		t.Run(tc.name, func(t *testing.T) {
			attachers := Attachers{"also-safe.example": {Serving: true}}
			for d, ev := range tc.attachers {
				attachers[d] = ev
			}
			got := VolumesToRelease(node, safe, attachers, keepNone, nil, late, delay)
			want := []v1.UniqueVolumeName{b}
			if tc.wantWhy == "" {
				want = []v1.UniqueVolumeName{a, b}
			}
			if !slices.Equal(got.Volumes, want) || !strings.Contains(got.Withheld, tc.wantWhy) || (tc.wantWhy == "") != (got.Withheld == "") {
				t.Errorf("VolumesToRelease() = %+v, want %v, withheld mentioning %q", got, want, tc.wantWhy)
			}
		})
	}
	if got := VolumesToRelease(node, safe, nil, keepNone, nil, late, delay); len(got.Volumes) != 0 || !strings.Contains(got.Why, "kept") {
		t.Errorf("no evidence at all: %+v, want nothing released and why", got)
	}
	// A ReadWriteMany volume stays whatever the evidence.
	rwx := func(v v1.UniqueVolumeName) string {
		if v == a {
			return "volume a is ReadWriteMany"
		}
		return ""
	}
	both := Attachers{"safe.example": {Serving: true}, "also-safe.example": {Serving: true}}
	if got := VolumesToRelease(node, safe, both, rwx, nil, late, delay); !slices.Equal(got.Volumes, []v1.UniqueVolumeName{b}) || !strings.Contains(got.Withheld, "ReadWriteMany") {
		t.Errorf("RWX volume: %+v, want only %s released and the RWX volume withheld", got, b)
	}
}
