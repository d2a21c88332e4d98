package outofservice

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// TestUntaintRechecksVolumeAttachmentsFresh: the caches show a rebooted,
// Ready node with nothing left on it. When the API server still lists a
// VolumeAttachment of the node (the cache lags), the write-time re-check
// gathers the pods and VolumeAttachments fresh and keeps the taint.
func TestUntaintRechecksVolumeAttachmentsFresh(t *testing.T) {
	added := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(added.Add(time.Minute)), testobj.BootID("boot-2"),
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, added),
		testobj.Annotation(names.BootIDAnnotation, Record("boot-1", added)))
	for _, tc := range []struct {
		name      string
		lagging   bool
		wantTaint bool
	}{
		{"the API server agrees with the cache: untainted", false, false},
		{"the API server still has a VolumeAttachment: kept", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ctrltest.New(t, added.Add(2*time.Minute), node)
			c, err := New(f.Informers, f.Actuator)
			if err != nil {
				t.Fatal(err)
			}
			c.now = f.Clock.Now
			f.Start()
			if tc.lagging {
				f.CacheMisses(testobj.VA("va-1", "d", "pv-1", "n1"))
			}
			r := f.Sync(c.sync, "n1")
			if refused := actuator.IsDecisionChanged(r.Err); refused != tc.wantTaint {
				t.Fatalf("sync: %v, want a refusal on fresh data: %v", r.Err, tc.wantTaint)
			}
			got, err := c.nodes.Get("n1")
			if err != nil {
				t.Fatal(err)
			}
			if has := nodeutil.HasTaint(got, names.OutOfServiceTaint); has != tc.wantTaint {
				t.Errorf("out-of-service taint present: %v, want %v", has, tc.wantTaint)
			}
		})
	}
}
