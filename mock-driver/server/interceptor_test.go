package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

func TestAuditRecord(t *testing.T) {
	fenced := &csi.ControllerUnpublishVolumeRequest{VolumeId: "v", NodeId: "node-a"}
	fence.SetFence(fenced, true)
	forcedUnstage := &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s"}
	fence.SetForceUnstage(forcedUnstage, true)
	forcedUnpublish := &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/t"}
	fence.SetForceUnpublish(forcedUnpublish, true)

	tests := []struct {
		name   string
		method string
		req    any
		resp   any
		err    error
		want   audit.Record
	}{
		{
			name:   "fenced unpublish names the request's node, not the socket's",
			method: "/csi.v1.Controller/ControllerUnpublishVolume", req: fenced,
			want: audit.Record{Method: "ControllerUnpublishVolume", VolumeID: "v", NodeID: "node-a", Fence: true, Code: "OK"},
		},
		{
			name:   "controller call without a node has none",
			method: "/csi.v1.Controller/DeleteVolume", req: &csi.DeleteVolumeRequest{VolumeId: "v"},
			want: audit.Record{Method: "DeleteVolume", VolumeID: "v", Code: "OK"},
		},
		{
			name:   "create records the new ID and name",
			method: "/csi.v1.Controller/CreateVolume", req: &csi.CreateVolumeRequest{Name: "pvc"},
			resp: &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-1"}},
			want: audit.Record{Method: "CreateVolume", VolumeID: "vol-1", Code: "OK", Message: "name=pvc"},
		},
		{
			name:   "forced unstage acts as the socket's node",
			method: "/csi.v1.Node/NodeUnstageVolume", req: forcedUnstage,
			want: audit.Record{Method: "NodeUnstageVolume", VolumeID: "v", NodeID: "sock-node", Force: true, Code: "OK"},
		},
		{
			name:   "forced unpublish",
			method: "/csi.v1.Node/NodeUnpublishVolume", req: forcedUnpublish,
			want: audit.Record{Method: "NodeUnpublishVolume", VolumeID: "v", NodeID: "sock-node", Force: true, Code: "OK"},
		},
		{
			name:   "refused write",
			method: "/fenceline.mock.v1.Array/Write", req: &mockv1.WriteRequest{VolumeId: "v", Data: []byte("abc")},
			err:  status.Error(codes.PermissionDenied, "fenced"),
			want: audit.Record{Method: "Write", VolumeID: "v", NodeID: "sock-node", Code: "PermissionDenied", Message: "fenced"},
		},
		{
			name:   "accepted write",
			method: "/fenceline.mock.v1.Array/Write", req: &mockv1.WriteRequest{VolumeId: "v", Data: []byte("abc")},
			want: audit.Record{Method: "Write", VolumeID: "v", NodeID: "sock-node", Code: "OK", Message: "accepted 3 bytes"},
		},
		{
			name:   "listing fences names the node filter and counts the page",
			method: "/fenceline.fence.v1.FenceCapabilities/ListFences", req: &fencev1.ListFencesRequest{NodeId: "node-a", MaxEntries: 5},
			resp: &fencev1.ListFencesResponse{Entries: []*fencev1.Fence{{NodeId: "node-a", VolumeIds: []string{"v"}}}},
			want: audit.Record{Method: "ListFences", NodeID: "node-a", Code: "OK", Message: "fences=1"},
		},
		{
			name:   "a lift records what it lifted and why",
			method: "/fenceline.fence.v1.FenceCapabilities/LiftFence", req: &fencev1.LiftFenceRequest{NodeId: "node-a", Reason: "rebooted"},
			resp: &fencev1.LiftFenceResponse{Lifted: []*fencev1.Fence{{NodeId: "node-a", VolumeIds: []string{"v1"}}, {NodeId: "node-a", VolumeIds: []string{"v2"}}}},
			want: audit.Record{Method: "LiftFence", NodeID: "node-a", Lifted: "v1 v2", Code: "OK", Message: "reason=rebooted"},
		},
		{
			name:   "a lift of one volume names it, even when nothing was lifted",
			method: "/fenceline.fence.v1.FenceCapabilities/LiftFence", req: &fencev1.LiftFenceRequest{NodeId: "node-a", VolumeIds: []string{"v1"}},
			resp: &fencev1.LiftFenceResponse{},
			want: audit.Record{Method: "LiftFence", VolumeID: "v1", NodeID: "node-a", Code: "OK"},
		},
		{
			name:   "a refused lift",
			method: "/fenceline.fence.v1.FenceCapabilities/LiftFence", req: &fencev1.LiftFenceRequest{},
			err:  status.Error(codes.InvalidArgument, "node_id is required"),
			want: audit.Record{Method: "LiftFence", Code: "InvalidArgument", Message: "node_id is required"},
		},
		{
			name:   "plain error",
			method: "/csi.v1.Identity/Probe", req: &csi.ProbeRequest{}, err: errors.New("boom"),
			want: audit.Record{Method: "Probe", Code: "Unknown", Message: "boom"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := auditRecord(tc.method, "sock-node", tc.req, tc.resp, tc.err)
			if got.Time.IsZero() {
				t.Error("record has no time")
			}
			got.Time = tc.want.Time
			if got != tc.want {
				t.Fatalf("record = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLostAnswer(t *testing.T) {
	answer := status.Error(codes.DeadlineExceeded, "injected fault for ControllerUnpublishVolume")
	base := audit.Record{Method: "ControllerUnpublishVolume", VolumeID: "v", NodeID: "node-a", Fence: true, Code: "OK"}
	tests := []struct {
		name        string
		handlerErr  error
		wantApplied bool
		wantInMsg   string
	}{
		{name: "carried out", wantApplied: true, wantInMsg: "answer was lost"},
		{name: "refused by the array", handlerErr: status.Error(codes.FailedPrecondition, "in use"), wantInMsg: "refused the call: in use"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := lostAnswer(base, tc.handlerErr, answer)
			if got.Code != "DeadlineExceeded" || got.Applied != tc.wantApplied || !strings.Contains(got.Message, tc.wantInMsg) {
				t.Fatalf("record %+v; want code DeadlineExceeded, applied %t, message with %q", got, tc.wantApplied, tc.wantInMsg)
			}
		})
	}
}
