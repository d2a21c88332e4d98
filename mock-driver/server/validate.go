package server

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The checks here run before any lookup, so that a request missing a
// required field is InvalidArgument even when its IDs are made up, as the
// spec and csi-sanity expect.

func required(field, value string) error {
	if value == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	return nil
}

// validateCapability checks one volume capability and returns its mode.
func validateCapability(c *csi.VolumeCapability) (csi.VolumeCapability_AccessMode_Mode, error) {
	if c == nil {
		return 0, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if c.GetBlock() == nil && c.GetMount() == nil {
		return 0, status.Error(codes.InvalidArgument, "volume_capability needs an access type (block or mount)")
	}
	mode := c.GetAccessMode().GetMode()
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return 0, status.Error(codes.InvalidArgument, "volume_capability needs an access mode")
	}
	if _, known := csi.VolumeCapability_AccessMode_Mode_name[int32(mode)]; !known {
		return 0, status.Errorf(codes.InvalidArgument, "unknown access mode %d", mode)
	}
	return mode, nil
}

// validateCapabilities checks a non-empty list of capabilities.
func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		if _, err := validateCapability(c); err != nil {
			return err
		}
	}
	return nil
}
