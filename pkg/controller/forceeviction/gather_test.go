package forceeviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/names"
)

// TestUntaintRechecksVolumeAttachmentsFresh: the caches show a dead node
// with every pod gone and nothing attached, but the API server still lists
// a VolumeAttachment of the node (the cache lags). The untaint's write-time
// re-check gathers the VolumeAttachments fresh and keeps the taint.
func TestUntaintRechecksVolumeAttachmentsFresh(t *testing.T) {
	t0 := testobj.Epoch
	f, c := start(t, testobj.Node("n1", testobj.NotReadySince(t0.Add(-time.Hour)), testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)))
	f.CacheMisses(testobj.VA("va-1", "disk.example.com", "pv-1", "n1"))
	r := f.Sync(c.sync, "n1")
	if !actuator.IsDecisionChanged(r.Err) {
		t.Fatalf("sync: %v, want the untaint refused on fresh data", r.Err)
	}
	if len(r.Writes) != 0 {
		t.Errorf("writes %v, want none: the taint stays", r.Writes)
	}
}
