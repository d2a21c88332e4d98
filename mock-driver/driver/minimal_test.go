package driver_test

import (
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/driver"
)

// TestMinimalController: a driver advertising only the minimum an attach
// needs lists exactly CREATE_DELETE_VOLUME and PUBLISH_UNPUBLISH_VOLUME and
// refuses readonly=true, which the CSI spec forbids without
// PUBLISH_READONLY; a full driver accepts it.
func TestMinimalController(t *testing.T) {
	tests := []struct {
		name         string
		minimal      bool
		wantCaps     []csi.ControllerServiceCapability_RPC_Type
		wantReadOnly codes.Code
	}{
		{
			name:    "minimal",
			minimal: true,
			wantCaps: []csi.ControllerServiceCapability_RPC_Type{
				csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
				csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
			},
			wantReadOnly: codes.InvalidArgument,
		},
		{
			name:    "full",
			minimal: false,
			wantCaps: []csi.ControllerServiceCapability_RPC_Type{
				csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
				csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
				csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
				csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
				csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
				csi.ControllerServiceCapability_RPC_GET_CAPACITY,
				csi.ControllerServiceCapability_RPC_GET_VOLUME,
				csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
			},
			wantReadOnly: codes.OK,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, func(c *driver.Config) { c.MinimalController = tc.minimal })
			resp, err := w.ctrl.ControllerGetCapabilities(w.ctx, &csi.ControllerGetCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var got []csi.ControllerServiceCapability_RPC_Type
			for _, c := range resp.GetCapabilities() {
				got = append(got, c.GetRpc().GetType())
			}
			if !slices.Equal(got, tc.wantCaps) {
				t.Errorf("capabilities = %v, want %v", got, tc.wantCaps)
			}
			id := w.createVolume("pvc-1")
			req := &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: rwoCap()}
			if _, err := w.ctrl.ControllerPublishVolume(w.ctx, req); err != nil {
				t.Fatalf("publish without readonly: %v", err)
			}
			req.VolumeId, req.Readonly = w.createVolume("pvc-2"), true
			_, err = w.ctrl.ControllerPublishVolume(w.ctx, req)
			wantCode(t, "readonly publish", err, tc.wantReadOnly)
		})
	}
}
