package quarantine

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/names"
)

// TestLiftRechecksVolumeAttachmentsFresh: the caches show a quarantined
// node Ready past the lift delay with nothing left, but the API server
// still lists a released volume's VolumeAttachment for it (the cache lags).
// The lift's write-time re-check gathers the VolumeAttachments fresh and
// keeps the quarantine.
func TestLiftRechecksVolumeAttachmentsFresh(t *testing.T) {
	t0 := testobj.Epoch
	optIn := map[string]string{names.SafeDetachAnnotation: "true"}
	f, c := start(t, t0.Add(syncDelay+time.Second), evidenceOf{"safe.example": true},
		testobj.CSIDriver("safe.example", optIn), testobj.CSIPV("pv-1", "safe.example", "h1", v1.ReadWriteOnce),
		testobj.Node("n1", testobj.ReadySince(t0), testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)))
	f.CacheMisses(testobj.VA(safeVA, "safe.example", "pv-1", "n1"))
	r := f.Sync(c.sync, "n1")
	if !actuator.IsDecisionChanged(r.Err) {
		t.Fatalf("sync: %v, want the lift refused on fresh data", r.Err)
	}
	if len(r.Writes) != 0 {
		t.Errorf("writes %v, want none: the quarantine stays", r.Writes)
	}
}
