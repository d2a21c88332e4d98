package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/pkg/fence"
)

// MarkerFile is the file the node plugin writes into a staging or target
// directory to stand for a mounted file system; it holds the volume ID.
const MarkerFile = ".fenceline-mock-volume"

type nodeServer struct {
	csi.UnimplementedNodeServer
	sh   *Shared
	node string
}

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

// NodeGetCapabilities lists the official node capabilities; FORCE_UNPUBLISH
// is advertised through the FenceCapabilities service.
func (s *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range nodeCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

// NodeGetInfo reports the socket's node identity and attachment limit.
func (s *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.node, MaxVolumesPerNode: s.sh.Array.MaxVolumesPerNode()}, nil
}

// NodeStageVolume stages an attached volume at the staging path.
func (s *nodeServer) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	mode, err := validateCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	// The publish context is the array's word on where the volume was
	// attached; a context meant for another node means the CO mixed up
	// nodes, and staging would use someone else's LUN.
	if n := req.GetPublishContext()[array.PublishContextNode]; n != "" && n != s.node {
		return nil, status.Errorf(codes.InvalidArgument, "publish context is for node %s, this is node %s", n, s.node)
	}
	path := req.GetStagingTargetPath()
	err = s.sh.Array.NodeStage(s.node, req.GetVolumeId(), path, mode, func() error {
		return writeMarker(path, req.GetVolumeId())
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume undoes NodeStageVolume. force=true (read with
// fence.IsForcedUnstage) succeeds on a fenced volume and is the clean-up
// that lets the node have the volume again.
func (s *nodeServer) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	path := req.GetStagingTargetPath()
	err := s.sh.Array.NodeUnstage(s.node, req.GetVolumeId(), path, fence.IsForcedUnstage(req), func(targets []string) error {
		for _, t := range targets {
			if err := removePath(t); err != nil {
				return err
			}
		}
		// The staging directory belongs to the CO; only our mark goes.
		return removePath(filepath.Join(path, MarkerFile))
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume creates the target path for a staged volume.
func (s *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	mode, err := validateCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	if err := required("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	err = s.sh.Array.NodePublish(s.node, req.GetVolumeId(), target, req.GetStagingTargetPath(), mode, req.GetReadonly(), func() error {
		return writeMarker(target, req.GetVolumeId())
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume removes the target path. force=true (read with
// fence.IsForcedUnpublish) succeeds on a fenced volume.
func (s *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("target_path", req.GetTargetPath()); err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	err := s.sh.Array.NodeUnpublish(s.node, req.GetVolumeId(), target, fence.IsForcedUnpublish(req), func() error {
		// The SP created the target path, so the SP removes it.
		return removePath(target)
	})
	if err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports usage of a volume staged or published at the
// given path on this node.
func (s *nodeServer) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := required("volume_path", req.GetVolumePath()); err != nil {
		return nil, err
	}
	v, err := s.sh.Array.NodeVolumePath(s.node, req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %q: %v", req.GetVolumePath(), err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: v.CapacityBytes, Available: v.CapacityBytes},
		{Unit: csi.VolumeUsage_INODES, Total: 1 << 20, Available: 1<<20 - 1, Used: 1},
	}}, nil
}

// writeMarker creates dir (if needed) and the marker file in it.
func writeMarker(dir, volID string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return status.Errorf(codes.Internal, "create %s: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, MarkerFile), []byte(volID+"\n"), 0o640); err != nil {
		return status.Errorf(codes.Internal, "mark %s: %v", dir, err)
	}
	return nil
}

// removePath removes a file or directory tree; a missing path is success.
func removePath(p string) error {
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return status.Error(codes.Internal, fmt.Sprintf("remove %s: %v", p, err))
	}
	return nil
}
