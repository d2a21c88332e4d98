package world

import (
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
)

func TestTimeline(t *testing.T) {
	t0 := time.Unix(100, 0)
	tl := &Timeline{}
	tl.Add(t0.Add(2*time.Second), "pod db-0 Running on node-b")
	tl.Add(t0, "node node-a powered off")
	tl.AddAudit([]audit.Record{
		{Time: t0.Add(time.Second), Method: "ControllerUnpublishVolume", VolumeID: "v1", NodeID: "node-a", Fence: true, Code: "OK"},
		{Time: t0.Add(time.Second), Method: "Write", VolumeID: "v1", NodeID: "node-a", Code: "PermissionDenied"},
		{Time: t0.Add(3 * time.Second), Method: "NodeUnstageVolume", VolumeID: "v1", NodeID: "node-a", Code: "OK"},
		{Time: t0.Add(4 * time.Second), Method: "NodeUnstageVolume", VolumeID: "v1", NodeID: "node-a", Force: true, Code: "OK"},
	})
	want := []string{
		"node node-a powered off",
		"driver: ControllerUnpublishVolume(v1, node node-a) fence=true -> OK",
		"pod db-0 Running on node-b",
		"driver: NodeUnstageVolume(v1, node node-a) force=true -> OK",
	}
	got := tl.Entries()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d (writes and plain node calls left out):\n%s", len(got), len(want), tl.Format(t0))
	}
	for i, e := range got {
		if e.What != want[i] {
			t.Errorf("entry %d = %q, want %q", i, e.What, want[i])
		}
	}
	if at, ok := tl.First("fence=true"); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Errorf("First(fence=true) = %v, %v", at, ok)
	}
	if out := tl.Format(t0); !strings.Contains(out, "   +1.00s  driver: ControllerUnpublishVolume") {
		t.Errorf("Format:\n%s", out)
	}
}
