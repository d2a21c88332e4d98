package driver_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// fenceOff fences node off a fresh volume it uses and returns the volume.
func (w *world) fenceOff(name, node string) string {
	w.t.Helper()
	vol := w.createVolume(name)
	w.attachAndMount(vol, node)
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: node}
	fence.SetFence(req, true)
	if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, req); err != nil {
		w.t.Fatalf("fence %s off %s: %v", node, vol, err)
	}
	return vol
}

// TestListAndLiftFences shows and lifts fences through the extension, as a
// CO would: the lift is audited with what it lifted and why, and gives the
// node nothing back.
func TestListAndLiftFences(t *testing.T) {
	w := newWorld(t, nil)
	caps, err := fence.Discover(w.ctx, w.ctrlCC)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := w.fenceOff("pvc-1", "node-a"), w.fenceOff("pvc-2", "node-a")
	v3 := w.fenceOff("pvc-3", "node-b")
	fences, err := fence.ListFences(w.ctx, w.ctrlCC, caps, &fencev1.ListFencesRequest{MaxEntries: 1})
	if err != nil || len(fences) != 3 {
		t.Fatalf("ListFences = %d fences, %v; want 3", len(fences), err)
	}
	for _, f := range fences {
		if f.GetFencedAt() == nil || f.GetDetails() == "" || len(f.GetVolumeIds()) != 1 {
			t.Errorf("fence %v: want one volume, a time and details", f)
		}
	}
	lifted, err := fence.LiftFence(w.ctx, w.ctrlCC, caps, &fencev1.LiftFenceRequest{NodeId: "node-a", Reason: "node-a rebooted"})
	if err != nil || len(lifted) != 2 {
		t.Fatalf("LiftFence of node-a = %v, %v; want two fences lifted", lifted, err)
	}
	left, err := fence.ListFences(w.ctx, w.ctrlCC, caps, nil)
	if err != nil || len(left) != 1 || !fence.Covers(left[0], "node-b", v3) {
		t.Fatalf("fences after the lift: %v, %v; want node-b's only", left, err)
	}
	wantCode(t, "write from node-a after the lift", client.Write(w.ctx, w.nodes["node-a"], v1, nil), codes.FailedPrecondition)
	if v, err := w.ctrl.ControllerGetVolume(w.ctx, &csi.ControllerGetVolumeRequest{VolumeId: v2}); err != nil || len(v.GetStatus().GetPublishedNodeIds()) != 0 {
		t.Fatalf("volume %s after the lift: %v, %v; want it published nowhere", v2, v, err)
	}
	recs := audit.Filter(w.audit(), audit.Method("LiftFence"), audit.Node("node-a"), audit.OK())
	if len(recs) != 1 || len(recs[0].LiftedVolumes()) != 2 || recs[0].Message != "reason=node-a rebooted" {
		t.Fatalf("audited lifts: %+v; want one naming both volumes and the reason", recs)
	}
	if n := audit.Count(w.audit(), audit.Method("ListFences"), audit.OK()); n != 4 {
		t.Errorf("audited ListFences pages: %d, want 4 (three pages of one, then one of all)", n)
	}
	w.attachAndMount(v1, "node-a")
	if err := client.Write(w.ctx, w.nodes["node-a"], v1, nil); err != nil {
		t.Fatalf("write from node-a after a new publish: %v", err)
	}
}

// TestListAndLiftCanBeSwitchedOff: with --list-fences=false
// --lift-fence=false the controller advertises neither, and a call sent
// anyway is UNIMPLEMENTED; node sockets never serve them.
func TestListAndLiftCanBeSwitchedOff(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*driver.Config)
		node   string // "" for the controller socket
		want   fence.Capabilities
	}{
		{name: "controller, both off", mutate: func(c *driver.Config) { c.ListFences, c.LiftFence = false, false }, want: fence.Capabilities{UnpublishFence: true}},
		{name: "controller, list only", mutate: func(c *driver.Config) { c.LiftFence = false }, want: fence.Capabilities{UnpublishFence: true, ListFences: true}},
		{name: "node socket", node: "node-a", want: fence.Capabilities{ForceUnpublish: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.mutate)
			cc := w.ctrlCC
			if tc.node != "" {
				cc = w.nodes[tc.node]
			}
			caps, err := fence.Discover(w.ctx, cc)
			if err != nil || caps != tc.want {
				t.Fatalf("Discover = %+v, %v; want %+v", caps, err, tc.want)
			}
			raw := fencev1.NewFenceCapabilitiesClient(cc)
			if !tc.want.ListFences {
				_, err := raw.ListFences(w.ctx, &fencev1.ListFencesRequest{})
				wantCode(t, "ListFences sent anyway", err, codes.Unimplemented)
			}
			_, err = raw.LiftFence(w.ctx, &fencev1.LiftFenceRequest{NodeId: "node-a"})
			wantCode(t, "LiftFence sent anyway", err, codes.Unimplemented)
		})
	}
}

func TestLiftWithoutListIsRefused(t *testing.T) {
	cfg := newConfig(t.TempDir())
	cfg.ListFences = false
	if err := cfg.Validate(); err == nil {
		t.Fatal("a configuration that lifts fences without listing them validated")
	}
}
