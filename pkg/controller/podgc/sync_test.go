package podgc

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// start wires podgc to a fixture holding the objects and starts it.
func start(t *testing.T, objs ...runtime.Object) (*ctrltest.Fixture, *Controller) {
	t.Helper()
	f := ctrltest.New(t, testobj.Epoch, objs...)
	c, err := New(f.Informers, f.Actuator)
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	return f, c
}

// Writes of the sync tests, as ctrltest.Write spells them.
const (
	intentVA1 = "patch volumeattachments va-1"
	markDB0   = "update pods/status ns/db-0"
	deleteDB0 = "delete pods ns/db-0"
)

func TestSync(t *testing.T) {
	t0 := testobj.Epoch
	oos := testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)
	stuck := func(name string) *v1.Pod {
		return testobj.Pod("ns", name, testobj.OnNode("n1"), testobj.Terminating(t0))
	}
	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	intended := testobj.VA("va-1", "disk.example.com", "pv-1", "n1",
		testobj.VAAnnotation(names.FenceIntentAnnotation, cutoff.NewRecord(cutoff.ReasonSafeDetach, "", "controller/quarantine", t0).Encode()))
	tests := []struct {
		name string
		objs []runtime.Object
		// apiNode is the node as the API server returns it to a fresh
		// read, when it differs from the cached one.
		apiNode    *v1.Node
		wantWrites [][]string
		wantEvents []string
		wantIntent cutoff.Reason
		wantErr    bool
	}{{
		name:       "out of service and not Ready: the intent on the node's VolumeAttachments first, then the stuck pod goes",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), va},
		wantWrites: [][]string{{intentVA1}, {markDB0}, {deleteDB0}},
		wantEvents: []string{"Normal " + actuator.EventFenceIntent, "Warning " + actuator.EventForceDeleted + " Force-deleted: fenceline: node n1 out of service"},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name: "every stuck pod of the node goes, after the intent",
		objs: []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), stuck("db-1"), va},
		wantWrites: [][]string{{intentVA1},
			{markDB0, deleteDB0, "update pods/status ns/db-1", "delete pods ns/db-1"}},
		wantEvents: []string{actuator.EventFenceIntent, actuator.EventForceDeleted, actuator.EventForceDeleted},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name:       "out of service but Ready: the attach/detach controller detaches anyway, so the intent goes on; no pod is deleted",
		objs:       []runtime.Object{testobj.Node("n1", testobj.ReadySince(t0), oos), stuck("db-0"), va},
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name:       "a VolumeAttachment with an intent already is not written again",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), intended},
		wantWrites: [][]string{{markDB0}, {deleteDB0}},
		wantEvents: []string{actuator.EventForceDeleted},
		wantIntent: cutoff.ReasonSafeDetach,
	}, {
		name: "no out-of-service taint: nothing",
		objs: []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint("example.com/other", v1.TaintEffectNoExecute)), stuck("db-0"), va},
	}, {
		name:       "a pod that is not terminating stays",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), testobj.Pod("ns", "db-0", testobj.OnNode("n1")), va},
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent},
		wantIntent: cutoff.ReasonOutOfService,
	}, {
		name:       "the node reported Ready since the cache saw it: the re-check on the fresh node keeps the pod",
		objs:       []runtime.Object{testobj.Node("n1", testobj.NotReadySince(t0), oos), stuck("db-0"), va},
		apiNode:    testobj.Node("n1", testobj.ReadySince(t0.Add(time.Second)), oos),
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent, "Normal " + actuator.EventDecisionChanged + " Did not force-delete pod: node is Ready"},
		wantIntent: cutoff.ReasonOutOfService,
		wantErr:    true,
	}, {
		name: "the node is gone: nothing",
		objs: []runtime.Object{stuck("db-0"), va},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := start(t, tc.objs...)
			if tc.apiNode != nil {
				f.Kube.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, tc.apiNode.DeepCopy(), nil
				})
			}
			r := f.Sync(c.sync, "n1")
			if (r.Err != nil) != tc.wantErr || (r.Err != nil && !actuator.IsDecisionChanged(r.Err)) {
				t.Errorf("sync = %v, want an error %v (a decision changed on fresh data)", r.Err, tc.wantErr)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents})
			if got := f.Intent("va-1"); got != tc.wantIntent {
				t.Errorf("intent on va-1 = %q, want %q", got, tc.wantIntent)
			}
		})
	}
}
