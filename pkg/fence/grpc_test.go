package fence

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// serve serves a gRPC server on a unix socket in a fresh temp dir, lets
// register add services to it, and returns the socket path. The server is
// stopped when the test ends.
func serve(t *testing.T, register func(*grpc.Server)) string {
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

// startServer is serve plus a plain gRPC client connection to the socket,
// closed when the test ends.
func startServer(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	sock := serve(t, register)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// boolPtr returns a pointer to b, for table fields where nil means "unset".
func boolPtr(b bool) *bool { return &b }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recordingDriver is a CSI controller and node server that keeps a copy of
// every unpublish/unstage request it receives. It uses only the official
// csi package, so it stands for a driver that knows nothing of the
// extension; the fence-aware tests apply the fence readers to what it saw on
// the server side of the connection.
type recordingDriver struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	mu        sync.Mutex
	unpublish []*csi.ControllerUnpublishVolumeRequest
	nodeUnpub []*csi.NodeUnpublishVolumeRequest
	unstage   []*csi.NodeUnstageVolumeRequest
}

func (d *recordingDriver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unpublish = append(d.unpublish, proto.Clone(req).(*csi.ControllerUnpublishVolumeRequest))
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *recordingDriver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodeUnpub = append(d.nodeUnpub, proto.Clone(req).(*csi.NodeUnpublishVolumeRequest))
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *recordingDriver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unstage = append(d.unstage, proto.Clone(req).(*csi.NodeUnstageVolumeRequest))
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *recordingDriver) register(s *grpc.Server) {
	csi.RegisterControllerServer(s, d)
	csi.RegisterNodeServer(s, d)
}

// fenceAwareDriver decides on the server side of the connection, through the
// package's readers, whether each request was fenced or forced.
type fenceAwareDriver struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	mu              sync.Mutex
	fenced          []bool
	forcedUnpublish []bool
	forcedUnstage   []bool
}

func (d *fenceAwareDriver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fenced = append(d.fenced, IsFenced(req))
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *fenceAwareDriver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forcedUnpublish = append(d.forcedUnpublish, IsForcedUnpublish(req))
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *fenceAwareDriver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forcedUnstage = append(d.forcedUnstage, IsForcedUnstage(req))
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func TestFenceAwareDriverReadsFieldsOverGRPC(t *testing.T) {
	tests := []struct {
		name string
		// set is applied to the request by the CO; nil leaves it untouched.
		set  *bool
		want bool
	}{
		{name: "absent", set: nil, want: false},
		{name: "set true", set: boolPtr(true), want: true},
		{name: "set false", set: boolPtr(false), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := &fenceAwareDriver{}
			conn := startServer(t, func(s *grpc.Server) {
				csi.RegisterControllerServer(s, drv)
				csi.RegisterNodeServer(s, drv)
				RegisterCapabilitiesServer(s, Capabilities{UnpublishFence: true, ForceUnpublish: true})
			})
			ctx := testContext(t)
			ctrl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)

			unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: "vol-1", NodeId: "node-1"}
			nodeUnpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/target"}
			unstage := &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging"}
			if tc.set != nil {
				SetFence(unpub, *tc.set)
				SetForceUnpublish(nodeUnpub, *tc.set)
				SetForceUnstage(unstage, *tc.set)
			}
			if _, err := ctrl.ControllerUnpublishVolume(ctx, unpub); err != nil {
				t.Fatalf("ControllerUnpublishVolume: %v", err)
			}
			if _, err := node.NodeUnpublishVolume(ctx, nodeUnpub); err != nil {
				t.Fatalf("NodeUnpublishVolume: %v", err)
			}
			if _, err := node.NodeUnstageVolume(ctx, unstage); err != nil {
				t.Fatalf("NodeUnstageVolume: %v", err)
			}

			drv.mu.Lock()
			defer drv.mu.Unlock()
			for name, seen := range map[string][]bool{
				"fence on ControllerUnpublishVolume": drv.fenced,
				"force on NodeUnpublishVolume":       drv.forcedUnpublish,
				"force on NodeUnstageVolume":         drv.forcedUnstage,
			} {
				if len(seen) != 1 || seen[0] != tc.want {
					t.Errorf("%s: driver read %v, want [%v]", name, seen, tc.want)
				}
			}
		})
	}
}

// TestDriverWithoutExtensionAcceptsFencedRequests is the wire-compatibility
// promise: a driver built only on the official csi package answers a fenced
// or forced request normally and sees every official field unchanged.
func TestDriverWithoutExtensionAcceptsFencedRequests(t *testing.T) {
	drv := &recordingDriver{}
	conn := startServer(t, drv.register)
	ctx := testContext(t)

	unpub := &csi.ControllerUnpublishVolumeRequest{
		VolumeId: "vol-1",
		NodeId:   "node-1",
		Secrets:  map[string]string{"user": "admin"},
	}
	SetFence(unpub, true)
	if _, err := csi.NewControllerClient(conn).ControllerUnpublishVolume(ctx, unpub); err != nil {
		t.Fatalf("ControllerUnpublishVolume with fence=true on a plain driver: %v", err)
	}
	nodeUnpub := &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/target"}
	SetForceUnpublish(nodeUnpub, true)
	if _, err := csi.NewNodeClient(conn).NodeUnpublishVolume(ctx, nodeUnpub); err != nil {
		t.Fatalf("NodeUnpublishVolume with force=true on a plain driver: %v", err)
	}
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging"}
	SetForceUnstage(unstage, true)
	if _, err := csi.NewNodeClient(conn).NodeUnstageVolume(ctx, unstage); err != nil {
		t.Fatalf("NodeUnstageVolume with force=true on a plain driver: %v", err)
	}

	// The plain driver still validates its arguments as usual.
	bad := &csi.ControllerUnpublishVolumeRequest{NodeId: "node-1"}
	SetFence(bad, true)
	_, err := csi.NewControllerClient(conn).ControllerUnpublishVolume(ctx, bad)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("missing volume_id with fence=true: got %v, want InvalidArgument", err)
	}

	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.unpublish) != 1 || len(drv.nodeUnpub) != 1 || len(drv.unstage) != 1 {
		t.Fatalf("driver saw %d/%d/%d requests, want 1/1/1", len(drv.unpublish), len(drv.nodeUnpub), len(drv.unstage))
	}
	got := drv.unpublish[0]
	if got.GetVolumeId() != "vol-1" || got.GetNodeId() != "node-1" || got.GetSecrets()["user"] != "admin" {
		t.Errorf("official fields changed on the way: %v", got)
	}
	// The plain driver keeps the extension as unknown data: exactly the
	// bytes the contract documents.
	if raw := got.ProtoReflect().GetUnknown(); string(raw) != string(fenceTrue) {
		t.Errorf("unknown fields at the driver = % x, want % x", raw, fenceTrue)
	}
	if raw := drv.nodeUnpub[0].ProtoReflect().GetUnknown(); string(raw) != string(forceTrue) {
		t.Errorf("NodeUnpublish unknown fields at the driver = % x, want % x", raw, forceTrue)
	}
	if drv.nodeUnpub[0].GetTargetPath() != "/target" || drv.unstage[0].GetStagingTargetPath() != "/staging" {
		t.Errorf("official node fields changed: %v / %v", drv.nodeUnpub[0], drv.unstage[0])
	}
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name string
		caps Capabilities
	}{
		{name: "nothing", caps: Capabilities{}},
		{name: "fence only", caps: Capabilities{UnpublishFence: true}},
		{name: "force only", caps: Capabilities{ForceUnpublish: true}},
		{name: "both", caps: Capabilities{UnpublishFence: true, ForceUnpublish: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			drv := &recordingDriver{}
			conn := startServer(t, func(s *grpc.Server) {
				drv.register(s)
				RegisterCapabilitiesServer(s, tc.caps)
			})
			got, err := Discover(testContext(t), conn)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if got != tc.caps {
				t.Errorf("Discover = %+v, want %+v", got, tc.caps)
			}
		})
	}
}

func TestDiscoverWithoutExtensionMeansNoSupport(t *testing.T) {
	drv := &recordingDriver{}
	conn := startServer(t, drv.register)
	got, err := Discover(testContext(t), conn)
	if err != nil {
		t.Fatalf("Discover against a driver without the extension: %v", err)
	}
	if got != (Capabilities{}) {
		t.Errorf("Discover = %+v, want no capabilities", got)
	}
}

// scriptedCapabilities answers GetFenceCapabilities with a fixed response or
// error, to exercise what a CO does with answers our own server never gives.
type scriptedCapabilities struct {
	fencev1.UnimplementedFenceCapabilitiesServer
	resp *fencev1.GetFenceCapabilitiesResponse
	err  error
}

func (s *scriptedCapabilities) GetFenceCapabilities(context.Context, *fencev1.GetFenceCapabilitiesRequest) (*fencev1.GetFenceCapabilitiesResponse, error) {
	return s.resp, s.err
}

func TestDiscoverAnswers(t *testing.T) {
	tests := []struct {
		name     string
		server   *scriptedCapabilities
		want     Capabilities
		wantCode codes.Code
	}{
		{
			name: "unknown values from a newer driver are ignored",
			server: &scriptedCapabilities{resp: &fencev1.GetFenceCapabilitiesResponse{Capabilities: []fencev1.FenceCapability{
				fencev1.FenceCapability_FENCE_CAPABILITY_UNKNOWN, 99, fencev1.FenceCapability_FORCE_UNPUBLISH,
			}}},
			want:     Capabilities{ForceUnpublish: true},
			wantCode: codes.OK,
		},
		{
			name: "duplicates are fine",
			server: &scriptedCapabilities{resp: &fencev1.GetFenceCapabilitiesResponse{Capabilities: []fencev1.FenceCapability{
				fencev1.FenceCapability_UNPUBLISH_FENCE, fencev1.FenceCapability_UNPUBLISH_FENCE,
			}}},
			want:     Capabilities{UnpublishFence: true},
			wantCode: codes.OK,
		},
		{
			name:     "empty list means no support",
			server:   &scriptedCapabilities{resp: &fencev1.GetFenceCapabilitiesResponse{}},
			want:     Capabilities{},
			wantCode: codes.OK,
		},
		{
			name:     "explicit unimplemented means no support",
			server:   &scriptedCapabilities{err: status.Error(codes.Unimplemented, "not here")},
			want:     Capabilities{},
			wantCode: codes.OK,
		},
		{
			name:     "other errors are returned",
			server:   &scriptedCapabilities{err: status.Error(codes.Unavailable, "array offline")},
			want:     Capabilities{},
			wantCode: codes.Unavailable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := startServer(t, func(s *grpc.Server) { fencev1.RegisterFenceCapabilitiesServer(s, tc.server) })
			got, err := Discover(testContext(t), conn)
			if code := status.Code(err); code != tc.wantCode {
				t.Fatalf("Discover error %v has code %v, want %v", err, code, tc.wantCode)
			}
			if got != tc.want {
				t.Errorf("Discover = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDiscoverCancelledContextIsAnError(t *testing.T) {
	conn := startServer(t, func(s *grpc.Server) { RegisterCapabilitiesServer(s, Capabilities{UnpublishFence: true}) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := Discover(ctx, conn)
	if err == nil {
		t.Fatal("Discover with a cancelled context returned no error")
	}
	if status.Code(err) != codes.Canceled {
		t.Errorf("Discover error %v: code %v, want Canceled", err, status.Code(err))
	}
	if got != (Capabilities{}) {
		t.Errorf("Discover returned %+v alongside an error, want zero", got)
	}
}
