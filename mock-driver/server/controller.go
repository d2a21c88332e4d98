package server

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/pkg/fence"
)

type controllerServer struct {
	csi.UnimplementedControllerServer
	sh *Shared
}

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

// attachOnly reports whether a capability belongs to the attach step, which
// a driver without one (attachRequired: false) does not advertise.
func attachOnly(c csi.ControllerServiceCapability_RPC_Type) bool {
	switch c {
	case csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY:
		return true
	}
	return false
}

// minimal reports whether a capability is one the minimal controller
// (array.Semantics.MinimalController) advertises.
func minimal(c csi.ControllerServiceCapability_RPC_Type) bool {
	return c == csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME ||
		c == csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME
}

// ControllerGetCapabilities lists the official capabilities only. The fence
// extension's UNPUBLISH_FENCE goes through the FenceCapabilities service,
// because csi-sanity (and other strict COs) reject unknown enum values.
func (s *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range controllerCaps {
		sem := s.sh.Array.Semantics()
		if sem.NoAttach && attachOnly(c) || sem.MinimalController && !minimal(c) {
			continue
		}
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

// CreateVolume creates a volume or returns the same-named one.
func (s *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if err := required("name", req.GetName()); err != nil {
		return nil, err
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	need, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if need < 0 || limit < 0 || (limit > 0 && need > limit) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid capacity range: required %d, limit %d", need, limit)
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	if len(req.GetMutableParameters()) > 0 {
		return nil, status.Error(codes.InvalidArgument, "mutable parameters are not supported")
	}
	v, err := s.sh.Array.CreateVolume(req.GetName(), need, limit, req.GetParameters())
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: csiVolume(v)}, nil
}

// DeleteVolume deletes a volume; unknown IDs succeed.
func (s *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := s.sh.Array.DeleteVolume(req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerPublishVolume attaches a volume to a node the array knows.
func (s *controllerServer) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("node_id", req.GetNodeId()); err != nil {
		return nil, err
	}
	mode, err := validateCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if req.GetReadonly() && s.sh.Array.Semantics().MinimalController {
		// "CO MUST set this field to false if SP does not have the
		// PUBLISH_READONLY controller capability."
		return nil, status.Error(codes.InvalidArgument, "readonly is set but the driver does not advertise PUBLISH_READONLY")
	}
	pc, err := s.sh.Array.Publish(req.GetVolumeId(), req.GetNodeId(), mode, req.GetReadonly())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: pc}, nil
}

// ControllerUnpublishVolume detaches a volume. With fence=true (read with
// fence.IsFenced, since the field is not in the official CSI message) the
// node is cut off before the call returns; see array.Semantics for what a
// plain unpublish does while the node still uses the volume.
func (s *controllerServer) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := s.sh.Array.Unpublish(req.GetVolumeId(), req.GetNodeId(), fence.IsFenced(req)); err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms any well-formed capability: the
// array supports every access mode and both access types.
func (s *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	v, err := s.sh.Array.Volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetMutableParameters()) > 0 {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "mutable parameters are not supported"}, nil
	}
	// Every access mode and both access types are supported by the array.
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         v.Parameters,
	}}, nil
}

// ListVolumes pages through volumes with their published nodes.
func (s *controllerServer) ListVolumes(_ context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_entries must not be negative, got %d", req.GetMaxEntries())
	}
	vols, next, err := s.sh.Array.ListVolumes(int(req.GetMaxEntries()), req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: csiVolume(v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.PublishedNodes()},
		})
	}
	return resp, nil
}

// ControllerGetVolume returns one volume with its published nodes.
func (s *controllerServer) ControllerGetVolume(_ context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	v, err := s.sh.Array.Volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: csiVolume(v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: v.PublishedNodes()},
	}, nil
}

// GetCapacity returns the array's free bytes.
func (s *controllerServer) GetCapacity(_ context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	for _, c := range req.GetVolumeCapabilities() {
		if _, err := validateCapability(c); err != nil {
			return nil, err
		}
	}
	return &csi.GetCapacityResponse{AvailableCapacity: s.sh.Array.AvailableCapacity()}, nil
}

func csiVolume(v *array.Volume) *csi.Volume {
	return &csi.Volume{VolumeId: v.ID, CapacityBytes: v.CapacityBytes, VolumeContext: v.Parameters}
}
