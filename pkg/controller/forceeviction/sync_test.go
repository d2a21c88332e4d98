package forceeviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/renewals"
	"fenceline.io/fenceline/pkg/names"
)

const syncGrace = DefaultReadyGrace

// start wires force-eviction to a fixture holding the objects and starts
// it. The Lease renewals are observed on the fixture's clock.
func start(t *testing.T, objs ...runtime.Object) (*ctrltest.Fixture, *Controller) {
	t.Helper()
	f := ctrltest.New(t, testobj.Epoch, objs...)
	c, err := New(f.Informers, f.NodeLeases, f.Actuator, syncGrace)
	if err != nil {
		t.Fatal(err)
	}
	c.now = f.Clock.Now
	// New's tracker reads the machine's clock; this one sees the same
	// Lease events on the fixture's.
	c.renewed = renewals.NewTracker(f.Clock.Now)
	seen, err := f.NodeLeases.Coordination().V1().Leases().Informer().AddEventHandler(c.renewed)
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	// A synced cache has not told its handlers yet: the Leases must be
	// observed before the test moves the clock.
	if !cache.WaitForCacheSync(f.Ctx.Done(), seen.HasSynced) {
		t.Fatal("the Lease renewals were never observed")
	}
	return f, c
}

func TestSync(t *testing.T) {
	t0 := testobj.Epoch
	taint := testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)
	dead := testobj.Node("n1", testobj.NotReadySince(t0.Add(-time.Hour)), taint)
	pod := testobj.Pod("ns", "db-0", testobj.OnNode("n1"), testobj.Claim("data", "data-db-0"))
	volume := []runtime.Object{testobj.PVC("ns", "data-db-0", "pv-1"), testobj.VA("va-1", "disk.example.com", "pv-1", "n1")}
	with := func(objs ...runtime.Object) []runtime.Object { return append(objs, volume...) }
	evicts := [][]string{{"update nodes n1"}, {"patch volumeattachments va-1"}, {"update pods/status ns/db-0"}, {"delete pods ns/db-0"}}
	evictEvents := []string{actuator.EventFenceIntent, "Warning " + actuator.EventForceDeleted + " Force-deleted: fenceline: node n1 tainted " + names.ForceEvictionTaint}
	tests := []struct {
		name string
		objs []runtime.Object
		// silent is how long the clock runs after the informers saw the
		// objects, before the sync.
		silent     time.Duration
		wantWrites [][]string
		wantEvents []string
		wantAfter  time.Duration
		wantRecord string
		wantIntent cutoff.Reason
	}{{
		name:       "no node Lease, not Ready: the volumes recorded on the node, the intent, then the pod goes",
		objs:       with(dead, pod),
		wantWrites: evicts,
		wantEvents: evictEvents,
		wantRecord: "pv-1",
		wantIntent: cutoff.ReasonForceEviction,
	}, {
		name:      "the kubelet renewed its Lease: nothing evicted, a look again when the renewal is too old",
		objs:      with(dead, pod, testobj.Lease("n1", t0)),
		wantAfter: syncGrace,
	}, {
		name:       "the Lease not seen renewed for the grace: evicted",
		objs:       with(dead, pod, testobj.Lease("n1", t0)),
		silent:     syncGrace,
		wantWrites: evicts,
		wantEvents: evictEvents,
		wantRecord: "pv-1",
		wantIntent: cutoff.ReasonForceEviction,
	}, {
		name: "a pod that tolerates the taint stays; the VolumeAttachment holds the taint",
		objs: with(dead, testobj.Pod("ns", "db-0", testobj.OnNode("n1"), testobj.Tolerate(names.ForceEvictionTaint))),
	}, {
		name:       "every pod gone, volumes still listed: they are released",
		objs:       with(testobj.Node("n1", testobj.NotReadySince(t0.Add(-time.Hour)), taint, testobj.VolumesInUse("kubernetes.io/csi/disk.example.com^h1"))),
		wantWrites: [][]string{{"update nodes/status n1"}},
		wantEvents: []string{actuator.EventVolumesReleased},
	}, {
		name:       "every pod gone and detached: the taint is removed",
		objs:       []runtime.Object{dead},
		wantWrites: [][]string{{"update nodes n1"}},
		wantEvents: []string{"Normal " + actuator.EventUntainted + " Removed taint " + names.ForceEvictionTaint},
	}, {
		name: "the kubelet back after the eviction started: the taint stays while an evicted volume's VolumeAttachment remains",
		objs: with(testobj.Node("n1", testobj.ReadySince(t0), taint, testobj.Annotation(EvictedVolumesAnnotation, "pv-1"))),
		// The record stays with the taint.
		wantRecord: "pv-1",
	}, {
		name: "no taint: nothing",
		objs: with(testobj.Node("n1", testobj.NotReadySince(t0.Add(-time.Hour))), pod),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := start(t, tc.objs...)
			f.Clock.Step(tc.silent)
			r := f.Sync(c.sync, "n1")
			if r.Err != nil {
				t.Fatalf("sync: %v", r.Err)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents, After: tc.wantAfter})
			if got := f.Intent("va-1"); got != tc.wantIntent {
				t.Errorf("intent on va-1 = %q, want %q", got, tc.wantIntent)
			}
			if n, err := c.nodes.Get("n1"); err == nil && n.Annotations[EvictedVolumesAnnotation] != tc.wantRecord {
				t.Errorf("evicted volumes recorded on the node = %q, want %q", n.Annotations[EvictedVolumesAnnotation], tc.wantRecord)
			}
		})
	}
}
