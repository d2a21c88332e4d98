package nodegone

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
)

// evidence is a fixed answer of the attacher evidence, cached and fresh.
type evidence struct {
	cached, fresh bool
}

func (e evidence) Serving(string, time.Time) (bool, string) {
	return e.cached, "no heartbeat"
}

func (e evidence) ServingFresh(context.Context, string) (bool, string, error) {
	return e.fresh, "no heartbeat", nil
}

func (evidence) AddHandler(func(string)) {}

// Writes of the sync tests, as ctrltest.Write spells them.
const (
	intentVA1 = "patch volumeattachments va-1"
	deleteVA1 = "delete volumeattachments va-1"
)

func TestSync(t *testing.T) {
	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	serving := evidence{cached: true, fresh: true}
	tests := []struct {
		name       string
		objs       []runtime.Object
		evidence   evidence
		wantWrites [][]string
		wantEvents []string
		wantIntent cutoff.Reason
		wantErr    bool
	}{{
		name:       "node gone, no pod on it, a fence-capable attacher: the intent, then the delete",
		objs:       []runtime.Object{va},
		evidence:   serving,
		wantWrites: [][]string{{intentVA1}, {deleteVA1}},
		wantEvents: []string{"Normal " + actuator.EventFenceIntent, "Normal " + actuator.EventDetachStarted + " Deleted the VolumeAttachment so that its attacher detaches it: fenceline: node n1 was deleted"},
		// Gone with the delete (no attacher finalizer here): the order of
		// the writes shows the intent came first.
	}, {
		name:     "the node exists: nothing",
		objs:     []runtime.Object{testobj.Node("n1"), va},
		evidence: serving,
	}, {
		name:     "a pod still bound to the gone node: nothing yet",
		objs:     []runtime.Object{va, testobj.Pod("ns", "db-0", testobj.OnNode("n1"))},
		evidence: serving,
	}, {
		name:       "no fence-capable attacher: a warning, nothing written",
		objs:       []runtime.Object{va},
		wantEvents: []string{"Warning " + EventNotDetached + " node n1 was deleted, but no fence-capable fenceline-attacher serves disk.example.com (no heartbeat)"},
	}, {
		name:       "the attacher stopped since the cache saw it: the fresh re-check keeps the VolumeAttachment",
		objs:       []runtime.Object{va},
		evidence:   evidence{cached: true},
		wantWrites: [][]string{{intentVA1}},
		wantEvents: []string{actuator.EventFenceIntent, "Normal " + actuator.EventDecisionChanged + " Did not delete VolumeAttachment va-1: node n1 was deleted, but no fence-capable"},
		wantIntent: cutoff.ReasonNodeGone,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := ctrltest.New(t, testobj.Epoch, tc.objs...)
			c, err := New(f.Informers, f.Actuator, tc.evidence)
			if err != nil {
				t.Fatal(err)
			}
			f.Start()
			r := f.Sync(c.sync, "n1")
			if (r.Err != nil) != tc.wantErr {
				t.Errorf("sync = %v, want an error %v", r.Err, tc.wantErr)
			}
			r.Check(t, ctrltest.Want{Writes: tc.wantWrites, Events: tc.wantEvents})
			if got := f.Intent("va-1"); got != tc.wantIntent {
				t.Errorf("intent on va-1 = %q, want %q", got, tc.wantIntent)
			}
		})
	}
}
