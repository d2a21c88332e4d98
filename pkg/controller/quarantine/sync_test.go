package quarantine

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// evidenceOf is the attacher evidence as a test states it: the drivers a
// fence-capable fenceline-attacher serves, the same from the caches and
// from the API server.
type evidenceOf map[string]bool

func (e evidenceOf) Serving(driver string, _ time.Time) (bool, string) {
	if e[driver] {
		return true, ""
	}
	return false, "no fenceline-attacher heartbeat Lease of driver " + driver
}

func (e evidenceOf) ServingFresh(_ context.Context, driver string) (bool, string, error) {
	ok, missing := e.Serving(driver, time.Time{})
	return ok, missing, nil
}

func (evidenceOf) AddHandler(func(string)) {}

const syncDelay, syncLiftDelay = 40 * time.Second, 10 * time.Second

// start wires quarantine to a fixture holding the objects, its clock at
// now, and starts it.
func start(t *testing.T, now time.Time, evidence evidenceOf, objs ...runtime.Object) (*ctrltest.Fixture, *Controller) {
	t.Helper()
	f := ctrltest.New(t, now, objs...)
	c, err := New(f.Informers, f.Actuator, syncDelay, syncLiftDelay, evidence, NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	c.now = f.Clock.Now
	f.Start()
	return f, c
}

// safeVolumeObjs are the safe-detach driver safe.example, its RWO volume
// pv-1 (handle h1) claimed by ns/data-db-0 and attached to n1, with the
// VolumeAttachment named as the attach/detach controller names it, and
// pods on n1 using the claim; driverAnnotations are the CSIDriver's.
func safeVolumeObjs(driverAnnotations map[string]string, pods ...*v1.Pod) []runtime.Object {
	objs := []runtime.Object{
		testobj.CSIDriver("safe.example", driverAnnotations),
		testobj.CSIPV("pv-1", "safe.example", "h1", v1.ReadWriteOnce),
		testobj.PVC("ns", "data-db-0", "pv-1"),
		testobj.VA(safeVA, "safe.example", "pv-1", "n1"),
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	return objs
}

var (
	safeVA     = nodeutil.CSIAttachmentName("safe.example", "h1", "n1")
	safeVolume = nodeutil.CSIUniqueVolumeName("safe.example", "h1")
)

func TestSync(t *testing.T) {
	t0 := testobj.Epoch
	late := t0.Add(syncDelay + time.Second)
	optIn := map[string]string{names.SafeDetachAnnotation: "true"}
	served := evidenceOf{"safe.example": true}
	quarantined := testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
	stuck := testobj.Pod("ns", "db-0", testobj.OnNode("n1"), testobj.Terminating(t0), testobj.Claim("data", "data-db-0"))
	down := func(opts ...testobj.NodeOption) *v1.Node {
		return testobj.Node("n1", append([]testobj.NodeOption{testobj.NotReadySince(t0)}, opts...)...)
	}
	tests := []struct {
		name       string
		now        time.Time
		evidence   evidenceOf
		objs       []runtime.Object
		wantWrites [][]string
		wantEvents []string
		wantIntent cutoff.Reason
		wantAfter  time.Duration
	}{{
		name:       "not Ready past the delay: the node is quarantined first, nothing deleted",
		now:        late,
		evidence:   served,
		objs:       append(safeVolumeObjs(optIn, stuck), down()),
		wantWrites: [][]string{{"update nodes n1"}},
		wantEvents: []string{"Warning " + actuator.EventTainted + " Added taint " + names.QuarantineTaint},
	}, {
		name:     "quarantined: the intent on the pod's VolumeAttachment, then the pod goes",
		now:      late,
		evidence: served,
		objs:     append(safeVolumeObjs(optIn, stuck), down(quarantined)),
		wantWrites: [][]string{{"patch volumeattachments " + safeVA},
			{"update pods/status ns/db-0"}, {"delete pods ns/db-0"}},
		wantEvents: []string{actuator.EventFenceIntent, "Warning " + actuator.EventForceDeleted + " Force-deleted: fenceline: node n1 not Ready"},
		wantIntent: cutoff.ReasonSafeDetach,
	}, {
		name:       "not Ready for less than the delay: wait for the rest of it",
		now:        t0.Add(10 * time.Second),
		evidence:   served,
		objs:       append(safeVolumeObjs(optIn, stuck), down(quarantined)),
		wantAfter:  syncDelay - 10*time.Second,
		wantEvents: nil,
	}, {
		name:       "no fence-capable attacher seen for the driver: refused, with a Warning on the pod",
		now:        late,
		evidence:   evidenceOf{},
		objs:       append(safeVolumeObjs(optIn, stuck), down(quarantined)),
		wantEvents: []string{"Warning " + EventNotSafe + " not safe to force-delete: no fenceline-attacher heartbeat Lease"},
	}, {
		name:       "a driver without the safe-detach opt-in: refused, nothing tainted",
		now:        late,
		evidence:   served,
		objs:       append(safeVolumeObjs(nil, stuck), down()),
		wantEvents: []string{"Warning " + EventNotSafe + " not safe to force-delete: volume \"data\""},
	}, {
		name:     "an unused volume still in use on a quarantined node: the intent, then the release",
		now:      late,
		evidence: served,
		objs:     append(safeVolumeObjs(optIn), down(quarantined, testobj.VolumesInUse(safeVolume))),
		wantWrites: [][]string{{"patch volumeattachments " + safeVA},
			{"update nodes/status n1"}},
		wantEvents: []string{actuator.EventFenceIntent, actuator.EventVolumesReleased},
		wantIntent: cutoff.ReasonSafeDetach,
	}, {
		name:       "an unused volume, no attacher seen: kept, and a Warning on the node says why",
		now:        late,
		evidence:   evidenceOf{},
		objs:       append(safeVolumeObjs(optIn), down(quarantined, testobj.VolumesInUse(safeVolume))),
		wantEvents: []string{"Warning " + EventNotReleased},
	}, {
		name:       "Ready again past the lift delay, its volume detached: the quarantine is lifted",
		now:        late,
		evidence:   served,
		objs:       []runtime.Object{testobj.CSIDriver("safe.example", optIn), testobj.Node("n1", testobj.ReadySince(t0), quarantined)},
		wantWrites: [][]string{{"update nodes n1"}},
		wantEvents: []string{"Normal " + actuator.EventUntainted + " Removed taint " + names.QuarantineTaint},
	}, {
		name:     "Ready again, a released volume's VolumeAttachment remains: the quarantine stays",
		now:      late,
		evidence: served,
		objs:     append(safeVolumeObjs(optIn), testobj.Node("n1", testobj.ReadySince(t0), quarantined)),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := start(t, tc.now, tc.evidence, tc.objs...)
			r := f.Sync(c.sync, "n1")
			if r.Err != nil {
				t.Fatalf("sync: %v", r.Err)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents, After: tc.wantAfter})
			if got := f.Intent(safeVA); got != tc.wantIntent {
				t.Errorf("intent on %s = %q, want %q", safeVA, got, tc.wantIntent)
			}
		})
	}
}

// A quarantined node's pod is deleted on the sync after the taint: the
// taint's own update brings it, and the deletion never precedes it.
func TestSyncTaintsThenDeletes(t *testing.T) {
	t0 := testobj.Epoch
	stuck := testobj.Pod("ns", "db-0", testobj.OnNode("n1"), testobj.Terminating(t0), testobj.Claim("data", "data-db-0"))
	objs := append(safeVolumeObjs(map[string]string{names.SafeDetachAnnotation: "true"}, stuck), testobj.Node("n1", testobj.NotReadySince(t0)))
	f, c := start(t, t0.Add(syncDelay+time.Second), evidenceOf{"safe.example": true}, objs...)
	ctrltest.WantWrites(t, f.Sync(c.sync, "n1").Writes, []string{"update nodes n1"})
	r := f.Sync(c.sync, "n1")
	ctrltest.WantWrites(t, r.Writes, []string{"patch volumeattachments " + safeVA}, []string{"update pods/status ns/db-0"}, []string{"delete pods ns/db-0"})
	// The pod is gone: nothing more until the node comes back.
	ctrltest.WantWrites(t, f.Sync(c.sync, "n1").Writes)
}
