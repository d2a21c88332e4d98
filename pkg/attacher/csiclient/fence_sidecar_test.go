package csiclient

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"

	"fenceline.io/fenceline/pkg/fence"
)

// fenceReadingController records, on the server side of the connection,
// whether each ControllerUnpublishVolume request carried fence = true.
type fenceReadingController struct {
	csi.UnimplementedControllerServer

	mu     sync.Mutex
	fenced []bool
}

func (d *fenceReadingController) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fenced = append(d.fenced, fence.IsFenced(req))
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// serveFenceTest serves a gRPC server on a unix socket in a fresh temp dir,
// lets register add services to it, and returns the socket path. The server
// is stopped when the test ends.
func serveFenceTest(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen on %s: %v", sock, err)
	}
	srv := grpc.NewServer()
	register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return sock
}

// TestFenceThroughCSILibUtilsConnection runs discovery and a fenced unpublish
// over the connection that kubernetes-csi sidecars (and Fenceline's attacher)
// use: csi-lib-utils' connection.Connect, with its logging and metrics
// interceptors in the path, which must neither hide UNIMPLEMENTED nor drop
// the extension field. It lives in the main module because the fence module
// does not depend on csi-lib-utils.
func TestFenceThroughCSILibUtilsConnection(t *testing.T) {
	tests := []struct {
		name       string
		register   bool
		caps       fence.Capabilities
		wantFenced bool
	}{
		{name: "driver without the extension", register: false, caps: fence.Capabilities{}, wantFenced: false},
		{name: "fence-aware driver", register: true, caps: fence.Capabilities{UnpublishFence: true}, wantFenced: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := &fenceReadingController{}
			sock := serveFenceTest(t, func(s *grpc.Server) {
				csi.RegisterControllerServer(s, drv)
				if tc.register {
					fence.RegisterCapabilitiesServer(s, tc.caps)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := connection.Connect(ctx, sock, metrics.NewCSIMetricsManagerForSidecar("mock.fenceline.io"))
			if err != nil {
				t.Fatalf("connection.Connect(%s): %v", sock, err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			caps, err := fence.Discover(ctx, conn)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if caps != tc.caps {
				t.Fatalf("Discover = %+v, want %+v", caps, tc.caps)
			}

			req := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
			fence.SetFence(req, caps.UnpublishFence)
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
