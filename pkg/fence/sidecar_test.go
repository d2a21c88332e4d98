package fence

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"
)

// TestThroughCSILibUtilsConnection runs discovery and a fenced unpublish over
// the connection that kubernetes-csi sidecars (and Fenceline's attacher) use:
// csi-lib-utils' connection.Connect, with its logging and metrics
// interceptors in the path, which must neither hide UNIMPLEMENTED nor drop
// the extension field.
func TestThroughCSILibUtilsConnection(t *testing.T) {
	tests := []struct {
		name       string
		register   bool
		caps       Capabilities
		wantFenced bool
	}{
		{name: "driver without the extension", register: false, caps: Capabilities{}, wantFenced: false},
		{name: "fence-aware driver", register: true, caps: Capabilities{UnpublishFence: true}, wantFenced: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := &fenceAwareDriver{}
			sock := serve(t, func(s *grpc.Server) {
				csi.RegisterControllerServer(s, drv)
				if tc.register {
					RegisterCapabilitiesServer(s, tc.caps)
				}
			})
			ctx := testContext(t)
			conn, err := connection.Connect(ctx, sock, metrics.NewCSIMetricsManagerForSidecar("mock.fenceline.io"))
			if err != nil {
				t.Fatalf("connection.Connect(%s): %v", sock, err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			caps, err := Discover(ctx, conn)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if caps != tc.caps {
				t.Fatalf("Discover = %+v, want %+v", caps, tc.caps)
			}

			req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
			SetFence(req, caps.UnpublishFence)
			if _, err := csi.NewControllerClient(conn).ControllerUnpublishVolume(ctx, req); err != nil {
				t.Fatalf("ControllerUnpublishVolume: %v", err)
			}
			drv.mu.Lock()
			defer drv.mu.Unlock()
			if len(drv.fenced) != 1 || drv.fenced[0] != tc.wantFenced {
				t.Errorf("driver read fence %v, want [%v]", drv.fenced, tc.wantFenced)
			}
		})
	}
}
