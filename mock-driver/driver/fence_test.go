package driver_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/mock-driver/server"
	"fenceline.io/fenceline/pkg/fence"
)

// TestFencedFailover walks the failover Fenceline exists for, over real
// sockets: node-a uses an RWO volume, is fenced off, node-b takes the
// volume over, and node-a can only come back after its clean-up, which its
// kubelet sends without force as the upstream kubelet does. The
// audit log must show the fence before the new attachment and no write from
// node-a accepted after the fence.
func TestFencedFailover(t *testing.T) {
	w := newWorld(t, nil)
	ctx := w.ctx
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	if _, err := os.Stat(filepath.Join(w.targetPath("node-a"), server.MarkerFile)); err != nil {
		t.Fatalf("NodePublishVolume did not create the target: %v", err)
	}
	if err := client.Write(ctx, w.nodes["node-a"], vol, []byte("a1")); err != nil {
		t.Fatalf("write from node-a: %v", err)
	}

	_, err := w.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "node-b", VolumeCapability: rwoCap()})
	wantCode(t, "publish to node-b while attached to node-a", err, codes.FailedPrecondition)
	_, err = w.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"})
	wantCode(t, "plain unpublish while node-a uses the volume", err, codes.FailedPrecondition)

	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}
	fence.SetFence(req, true)
	if _, err := w.ctrl.ControllerUnpublishVolume(ctx, req); err != nil {
		t.Fatalf("fenced unpublish: %v", err)
	}
	wantCode(t, "write from fenced node-a", client.Write(ctx, w.nodes["node-a"], vol, []byte("a2")), codes.PermissionDenied)

	w.attachAndMount(vol, "node-b")
	if err := client.Write(ctx, w.nodes["node-b"], vol, []byte("b1")); err != nil {
		t.Fatalf("write from node-b: %v", err)
	}
	list, err := w.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := list.GetEntries()[0].GetStatus().GetPublishedNodeIds(); !reflect.DeepEqual(got, []string{"node-b"}) {
		t.Fatalf("published_node_ids = %v, want [node-b]", got)
	}

	// node-a returns. Its kubelet's clean-up carries no force.
	nodeA := w.node("node-a")
	_, err = nodeA.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: w.stagingPath("node-a"), VolumeCapability: rwoCap()})
	wantCode(t, "restage on fenced node-a", err, codes.FailedPrecondition)
	if _, err := nodeA.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: w.targetPath("node-a")}); err != nil {
		t.Fatalf("unforced NodeUnpublish on fenced node-a: %v", err)
	}
	if _, err := os.Stat(w.targetPath("node-a")); !os.IsNotExist(err) {
		t.Fatalf("target path still there after NodeUnpublish: %v", err)
	}
	if v := w.d.Array().Snapshot().Volumes[vol]; len(v.Fenced) == 0 {
		t.Fatal("quarantine lifted while node-a still has the volume staged")
	}
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: w.stagingPath("node-a")}
	if _, err := nodeA.NodeUnstageVolume(ctx, unstage); err != nil {
		t.Fatalf("unforced NodeUnstage: %v", err)
	}
	if v := w.d.Array().Snapshot().Volumes[vol]; len(v.Fenced) != 0 {
		t.Fatalf("quarantine not lifted after unforced clean-up: %v", v.Fenced)
	}

	recs := w.audit()
	fenceAt := audit.FirstIndex(recs, audit.Method("ControllerUnpublishVolume"), audit.Node("node-a"), audit.Fenced(), audit.OK())
	publishB := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Node("node-b"), audit.OK())
	if fenceAt < 0 || publishB < 0 || fenceAt > publishB {
		t.Fatalf("fence at %d, publish to node-b at %d: want the fence first", fenceAt, publishB)
	}
	if n := audit.Count(recs[fenceAt:], audit.Method("Write"), audit.Node("node-a"), audit.OK()); n != 0 {
		t.Fatalf("%d writes from node-a accepted after the fence", n)
	}
	if n := audit.Count(recs[fenceAt:], audit.Method("Write"), audit.Node("node-a"), audit.Code("PermissionDenied")); n != 1 {
		t.Fatalf("refused writes from node-a recorded: %d, want 1", n)
	}
	if audit.FirstIndex(recs, audit.Method("NodeUnstageVolume"), audit.Node("node-a"), audit.OK()) < 0 {
		t.Fatal("NodeUnstageVolume of node-a not recorded")
	}
}

// TestRealArrayUnpublishAllowsSplitBrain shows the corruption fencing
// exists to prevent: in real-array mode a plain unpublish of a volume the
// node still uses succeeds, and the old node keeps writing after the volume
// moved.
func TestRealArrayUnpublishAllowsSplitBrain(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) { c.Unpublish = array.UnpublishRealArray })
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}); err != nil {
		t.Fatalf("unsafe unpublish: %v", err)
	}
	w.attachAndMount(vol, "node-b")
	for _, n := range []string{"node-b", "node-a"} {
		if err := client.Write(w.ctx, w.nodes[n], vol, []byte(n)); err != nil {
			t.Fatalf("write from %s: %v", n, err)
		}
	}
	recs := w.audit()
	publishB := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Node("node-b"), audit.OK())
	if n := audit.Count(recs[publishB:], audit.Method("Write"), audit.Node("node-a"), audit.OK()); n != 1 {
		t.Fatalf("accepted writes from node-a after the move: %d, want 1", n)
	}
}

// TestDriverWithoutFencing plays a driver without the extension: it
// advertises nothing, and fence=true changes nothing.
func TestDriverWithoutFencing(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) {
		c.Fence, c.ForceUnpublish, c.ListFences, c.LiftFence = false, false, false, false
	})
	caps, err := fence.Discover(w.ctx, w.ctrlCC)
	if err != nil {
		t.Fatal(err)
	}
	if caps != (fence.Capabilities{}) {
		t.Fatalf("capabilities = %+v, want none", caps)
	}
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}
	fence.SetFence(req, true)
	_, err = w.ctrl.ControllerUnpublishVolume(w.ctx, req)
	wantCode(t, "fence=true on a driver that cannot fence", err, codes.FailedPrecondition)
	if err := client.Write(w.ctx, w.nodes["node-a"], vol, nil); err != nil {
		t.Fatalf("node-a lost access: %v", err)
	}
}

func TestCapabilityDiscoveryPerSocket(t *testing.T) {
	w := newWorld(t, nil)
	tests := []struct {
		name string
		conn string
		want fence.Capabilities
	}{
		{name: "controller socket", conn: "", want: fence.Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true}},
		{name: "node socket", conn: "node-a", want: fence.Capabilities{ForceUnpublish: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc := w.ctrlCC
			if tc.conn != "" {
				cc = w.nodes[tc.conn]
			}
			got, err := fence.Discover(w.ctx, cc)
			if err != nil || got != tc.want {
				t.Fatalf("Discover = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestNodeSocketsActAsTheirNode(t *testing.T) {
	w := newWorld(t, nil)
	for _, n := range []string{"node-a", "node-b"} {
		info, err := w.node(n).NodeGetInfo(w.ctx, &csi.NodeGetInfoRequest{})
		if err != nil || info.GetNodeId() != n {
			t.Fatalf("NodeGetInfo on %s socket = %v, %v", n, info, err)
		}
	}
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	// node-b's socket writes as node-b, which has no access.
	wantCode(t, "write through node-b's socket", client.Write(w.ctx, w.nodes["node-b"], vol, nil), codes.FailedPrecondition)
	// The controller socket serves no node and cannot write.
	wantCode(t, "write through the controller socket", client.Write(w.ctx, w.ctrlCC, vol, nil), codes.FailedPrecondition)
	_, err := w.ctrl.ControllerPublishVolume(w.ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "node-c", VolumeCapability: rwoCap()})
	wantCode(t, "publish to a node the array does not know", err, codes.NotFound)
	// A publish context from node-a's attachment must not be used on node-b.
	_, err = w.node("node-b").NodeStageVolume(w.ctx, &csi.NodeStageVolumeRequest{
		VolumeId: vol, StagingTargetPath: w.stagingPath("node-b"), VolumeCapability: rwoCap(),
		PublishContext: map[string]string{"mock.fenceline.io/node": "node-a"},
	})
	wantCode(t, "stage with another node's publish context", err, codes.InvalidArgument)
}

// TestLostUnpublishAnswer: an injected DeadlineExceeded on the fenced
// unpublish reaches the CO as an error, but the array did fence; the audit
// record says so, and a retry is an idempotent success.
func TestLostUnpublishAnswer(t *testing.T) {
	w := newWorld(t, nil)
	vol := w.createVolume("pvc-1")
	w.attachAndMount(vol, "node-a")
	if err := client.SetFaults(w.ctx, w.ctrlCC, faults.LoseAnswers("ControllerUnpublishVolume", 1)); err != nil {
		t.Fatal(err)
	}
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-a"}
	fence.SetFence(req, true)
	_, err := w.ctrl.ControllerUnpublishVolume(w.ctx, req)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("fenced unpublish with a lost answer: %v, want DeadlineExceeded", err)
	}
	if v := w.d.Array().Snapshot().Volumes[vol]; len(v.Fenced) == 0 || len(v.Attachments) != 0 {
		t.Fatalf("array after the lost answer: fenced %v, attachments %v; want node-a fenced and detached", v.Fenced, v.Attachments)
	}
	wantCode(t, "write from node-a after the lost answer", client.Write(w.ctx, w.nodes["node-a"], vol, nil), codes.PermissionDenied)
	if _, err := w.ctrl.ControllerUnpublishVolume(w.ctx, req); err != nil {
		t.Fatalf("retried fenced unpublish: %v", err)
	}
	recs := audit.Filter(w.audit(), audit.Method("ControllerUnpublishVolume"))
	if len(recs) != 2 || !recs[0].Applied || recs[0].Code != "DeadlineExceeded" || recs[1].Applied || recs[1].Code != "OK" {
		t.Fatalf("audited unpublishes: %+v; want a lost (applied) answer, then OK", recs)
	}
	if n := len(audit.Filter(recs, audit.Effective())); n != 2 {
		t.Fatalf("effective unpublishes: %d, want 2", n)
	}
}
