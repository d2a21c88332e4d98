package world

import (
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/iscsi"
)

// A node fenced off a volume and then attached to it again: the writer of
// the new attachment is legitimate, the writer of the old one stays judged
// by the fence, whether the publish or the node's unstage lifted it, and
// with no lift at all both are judged.
func TestImportFencesPublishLiftsForNewWriters(t *testing.T) {
	const node, handle = "node-a", "vol-1"
	old := func(seq uint64) iscsi.Stamp { return iscsi.Stamp{Node: node, Boot: "b1", Generation: 1, Seq: seq} }
	renewed := func(seq uint64) iscsi.Stamp { return iscsi.Stamp{Node: node, Boot: "b1", Generation: 2, Seq: seq} }
	for _, tc := range []struct {
		name string
		lift string // the method that succeeded between the fence and the new writer, "" for none
		want int    // writes acknowledged after the fence that count
	}{
		{name: "published again", lift: "ControllerPublishVolume", want: 1},
		{name: "unstaged", lift: "NodeUnstageVolume", want: 1},
		{name: "a publish that failed lifts nothing", lift: "", want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := iscsi.NewLedger()
			write := func(s iscsi.Stamp) {
				l.Sent(s, uint32(s.Seq))
				l.Acked(s)
			}
			write(old(1))
			fenced := time.Now()
			write(old(2)) // the old attachment's writer, after its fence: a violation
			lifted := time.Now()
			write(renewed(1))
			recs := []audit.Record{
				{Method: "ControllerUnpublishVolume", Fence: true, Code: "OK", NodeID: node, VolumeID: handle, Time: fenced},
				{Method: "ControllerPublishVolume", Code: "Aborted", NodeID: node, VolumeID: handle, Time: lifted},
			}
			if tc.lift != "" {
				recs = append(recs, audit.Record{Method: tc.lift, Code: "OK", NodeID: node, VolumeID: handle, Time: lifted})
			}
			if n := importFences(l, recs, handle); n != 1 {
				t.Fatalf("%d fences imported, want 1", n)
			}
			if got := l.AckedAfterFence(node); got != tc.want {
				t.Errorf("%d writes acknowledged after the fence count, want %d", got, tc.want)
			}
		})
	}
}
