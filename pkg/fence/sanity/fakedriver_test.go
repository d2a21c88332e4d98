package sanity

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence"
)

// fakeDriver is a small fence-aware CSI driver with one node, serving
// everything on one socket. Its flaws are switchable, so that the tests can
// prove which case catches which flaw.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	caps fence.Capabilities
	// ignoreFence treats fence=true as a plain unpublish (a lie when
	// caps.UnpublishFence is set).
	ignoreFence bool
	// needForce keeps the fence until a forced clean-up, which no kubelet
	// sends.
	needForce bool
	// refusal is the code of a publish to a fenced node
	// (FAILED_PRECONDITION when zero).
	refusal codes.Code
	// needNode rejects a fence without node_id.
	needNode bool
	// secret, when set, is the value every call that carries CSI secrets
	// must send under the key "password"; others are UNAUTHENTICATED.
	secret string
	// fenceFlaws are the switchable flaws of ListFences and LiftFence.
	fenceFlaws

	mu      sync.Mutex
	next    int
	volumes map[string]*fakeVolume
	// calls counts the calls of the extension service by method name.
	calls map[string]int
}

type fakeVolume struct {
	attached, fenced, staged bool
	fencedAt                 time.Time
	targets                  map[string]bool
}

const fakeNode = "node-1"

func (d *fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "fake.fence.example.com", VendorVersion: "1"}, nil
}

func (d *fakeDriver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var out []*csi.ControllerServiceCapability
	types := []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}
	if !d.noListVolumes {
		types = append(types, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	for _, c := range types {
		out = append(out, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: out}, nil
}

func (d *fakeDriver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	c := &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{c}}, nil
}

func (d *fakeDriver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: fakeNode}, nil
}

// authenticate checks the secrets of a call, as a driver that needs
// credentials for its array does.
func (d *fakeDriver) authenticate(call string, secrets map[string]string) error {
	if d.secret != "" && secrets["password"] != d.secret {
		return status.Errorf(codes.Unauthenticated, "%s: the secrets do not hold the array's password", call)
	}
	return nil
}

func (d *fakeDriver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := d.authenticate("CreateVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	id := fmt.Sprintf("vol-%d", d.next)
	d.volumes[id] = &fakeVolume{targets: map[string]bool{}}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}}, nil
}

func (d *fakeDriver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := d.authenticate("DeleteVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.volumes, req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// volume looks up a volume under d.mu.
func (d *fakeDriver) volume(id string) (*fakeVolume, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	v, ok := d.volumes[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s", id)
	}
	return v, nil
}

func (d *fakeDriver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if err := d.authenticate("ControllerPublishVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if v.fenced {
		code := d.refusal
		if code == codes.OK {
			code = codes.FailedPrecondition
		}
		return nil, status.Error(code, "fenced off the node")
	}
	v.attached = true
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (d *fakeDriver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if err := d.authenticate("ControllerUnpublishVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.volume(req.GetVolumeId())
	if status.Code(err) == codes.NotFound {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if d.needNode && req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	if fence.IsFenced(req) && d.caps.UnpublishFence && !d.ignoreFence && (v.staged || len(v.targets) > 0) && !v.fenced {
		v.fenced, v.fencedAt = true, time.Now()
	}
	v.attached = false
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *fakeDriver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := d.authenticate("NodeStageVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if !v.attached || v.fenced {
		return nil, status.Error(codes.FailedPrecondition, "not attached")
	}
	v.staged = true
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *fakeDriver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := d.authenticate("NodePublishVolume", req.GetSecrets()); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if !v.staged {
		return nil, status.Error(codes.FailedPrecondition, "not staged")
	}
	v.targets[req.GetTargetPath()] = true
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *fakeDriver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	v, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	delete(v.targets, req.GetTargetPath())
	d.maybeLift(v, fence.IsForcedUnpublish(req))
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *fakeDriver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is required")
	}
	v, err := d.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	v.staged = false
	d.maybeLift(v, fence.IsForcedUnstage(req))
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// maybeLift lifts the fence once the node holds nothing of v.
func (d *fakeDriver) maybeLift(v *fakeVolume, forced bool) {
	if !v.staged && len(v.targets) == 0 && (forced || !d.needForce) {
		v.fenced = false
	}
}

// Write is the I/O hook: the node may write while the volume is attached
// or still used there, and not fenced.
func (d *fakeDriver) Write(_ context.Context, volumeID, nodeID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.volume(volumeID)
	if err != nil {
		return err
	}
	if nodeID != fakeNode || v.fenced || (!v.attached && !v.staged) {
		return status.Errorf(codes.PermissionDenied, "write from %s refused", nodeID)
	}
	return nil
}

// serveFake serves d (and, when register is set, the fence capability
// service with d.caps) on a unix socket and returns its endpoint.
func serveFake(t *testing.T, d *fakeDriver, register bool) string {
	t.Helper()
	d.volumes = map[string]*fakeVolume{}
	d.calls = map[string]int{}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.count))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	if register {
		d.registerFences(t, srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return "unix://" + sock
}
