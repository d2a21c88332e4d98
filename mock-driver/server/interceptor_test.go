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
