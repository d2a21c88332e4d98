package outofservice

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

func TestSync(t *testing.T) {
	t0 := testobj.Epoch
	now := t0.Add(time.Hour)
	taint := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, t0)
	recorded := testobj.Annotation(names.BootIDAnnotation, Record("boot-1", t0))
	back := func(opts ...testobj.NodeOption) *v1.Node {
		return testobj.Node("n1", append([]testobj.NodeOption{testobj.ReadySince(now.Add(-time.Minute)), testobj.BootID("boot-2"), taint, recorded}, opts...)...)
	}
	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	tests := []struct {
		name       string
		objs       []runtime.Object
		wantWrites [][]string
		wantEvents []string
		// wantTaint: the node keeps the taint; wantRecord: the node's
		// boot ID record after the sync.
		wantTaint  bool
		wantRecord string
	}{{
		name:       "tainted while down: the boot ID is recorded for this taint",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), taint)},
		wantWrites: [][]string{{"update nodes n1"}},
		wantTaint:  true, wantRecord: Record("boot-1", t0),
	}, {
		name:       "a taint without timeAdded gets the clock's time with the record",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))},
		wantWrites: [][]string{{"update nodes n1"}},
		wantTaint:  true, wantRecord: Record("boot-1", now),
	}, {
		name:       "rebooted, Ready, nothing left on it: the taint goes, then the record",
		objs:       []runtime.Object{back()},
		wantWrites: [][]string{{"update nodes n1"}, {"update nodes n1"}},
		wantEvents: []string{"Normal " + actuator.EventUntainted + " Removed taint " + names.OutOfServiceTaint + ": node rebooted"},
	}, {
		name:      "Ready with the boot ID it had while down: no proven power cycle, the taint stays",
		objs:      []runtime.Object{back(testobj.BootID("boot-1"))},
		wantTaint: true, wantRecord: Record("boot-1", t0),
	}, {
		name:      "rebooted, a pod still terminating: the taint stays",
		objs:      []runtime.Object{back(), testobj.Pod("ns", "db-0", testobj.OnNode("n1"), testobj.Terminating(t0))},
		wantTaint: true, wantRecord: Record("boot-1", t0),
	}, {
		name:      "rebooted, a VolumeAttachment remains: the taint stays",
		objs:      []runtime.Object{back(), va},
		wantTaint: true, wantRecord: Record("boot-1", t0),
	}, {
		name:      "node-fencing owns the taint: left to it",
		objs:      []runtime.Object{back(testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-req-n1"))},
		wantTaint: true, wantRecord: Record("boot-1", t0),
	}, {
		name:      "another fencer applied the taint: never removed",
		objs:      []runtime.Object{back(testobj.Annotation(names.OutOfServiceAppliedByAnnotation, "pacemaker"))},
		wantTaint: true, wantRecord: Record("boot-1", t0),
	}, {
		name:      "the record belongs to an earlier taint: a human must remove this one",
		objs:      []runtime.Object{back(testobj.Annotation(names.BootIDAnnotation, Record("boot-1", t0.Add(-time.Hour))))},
		wantTaint: true, wantRecord: Record("boot-1", t0.Add(-time.Hour)),
	}, {
		name:       "the taint gone, its record left: the record is cleared",
		objs:       []runtime.Object{testobj.Node("n1", testobj.ReadySince(t0), recorded)},
		wantWrites: [][]string{{"update nodes n1"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ctrltest.New(t, now, tc.objs...)
			c, err := New(f.Informers, f.Actuator)
			if err != nil {
				t.Fatal(err)
			}
			c.now = f.Clock.Now
			f.Start()
			r := f.Sync(c.sync, "n1")
			if r.Err != nil {
				t.Fatalf("sync: %v", r.Err)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents})
			n, err := c.nodes.Get("n1")
			if err != nil {
				t.Fatal(err)
			}
			if got := nodeutil.HasTaint(n, names.OutOfServiceTaint); got != tc.wantTaint {
				t.Errorf("node keeps the out-of-service taint: %v, want %v", got, tc.wantTaint)
			}
			if got := n.Annotations[names.BootIDAnnotation]; got != tc.wantRecord {
				t.Errorf("boot ID record = %q, want %q", got, tc.wantRecord)
			}
		})
	}
}
