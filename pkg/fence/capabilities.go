package fence

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// Capabilities a driver advertises through the extension service.
type Capabilities struct {
	// UnpublishFence means the controller service honours fence = true on
	// ControllerUnpublishVolume.
	UnpublishFence bool
	// ForceUnpublish means the node service honours force = true on
	// NodeUnpublishVolume and NodeUnstageVolume.
	ForceUnpublish bool
	// ListFences means the endpoint serves ListFences: the fences its
	// storage enforces, a page at a time.
	ListFences bool
	// LiftFence means the endpoint serves LiftFence. The contract allows it
	// only together with ListFences.
	LiftFence bool
}

// List returns the capabilities as the enum values sent on the wire, in a
// stable order.
func (c Capabilities) List() []fencev1.FenceCapability {
	var out []fencev1.FenceCapability
	if c.UnpublishFence {
		out = append(out, fencev1.FenceCapability_UNPUBLISH_FENCE)
	}
	if c.ForceUnpublish {
		out = append(out, fencev1.FenceCapability_FORCE_UNPUBLISH)
	}
	if c.ListFences {
		out = append(out, fencev1.FenceCapability_LIST_FENCES)
	}
	if c.LiftFence {
		out = append(out, fencev1.FenceCapability_LIFT_FENCE)
	}
	return out
}

// CapabilitiesFromList is the inverse of Capabilities.List. Values it does not
// know (including FENCE_CAPABILITY_UNKNOWN and values from a newer version of
// the extension) are ignored, as the contract requires.
func CapabilitiesFromList(list []fencev1.FenceCapability) Capabilities {
	var c Capabilities
	for _, v := range list {
		switch v {
		case fencev1.FenceCapability_UNPUBLISH_FENCE:
			c.UnpublishFence = true
		case fencev1.FenceCapability_FORCE_UNPUBLISH:
			c.ForceUnpublish = true
		case fencev1.FenceCapability_LIST_FENCES:
			c.ListFences = true
		case fencev1.FenceCapability_LIFT_FENCE:
			c.LiftFence = true
		}
	}
	return c
}

// NewCapabilitiesServer returns an implementation of the FenceCapabilities
// service that always answers GetFenceCapabilities with caps. Most drivers
// call RegisterCapabilitiesServer instead; this is for servers that are not
// a *grpc.Server (for example a test harness or a gRPC interceptor chain).
//
// This server has no fences to list or lift, so it never advertises
// ListFences or LiftFence, whatever caps says: advertising a call it would
// answer UNIMPLEMENTED would break the contract. A driver that lists and
// lifts fences uses NewFenceServer.
func NewCapabilitiesServer(caps Capabilities) fencev1.FenceCapabilitiesServer {
	caps.ListFences, caps.LiftFence = false, false
	return &fenceServer{caps: caps}
}

// RegisterCapabilitiesServer registers the FenceCapabilities extension service
// on s, the same gRPC server that serves the driver's CSI services, so that a
// CO connected to the driver's endpoint can discover caps. It must be called
// before s.Serve, like any gRPC registration. Like NewCapabilitiesServer it
// never advertises ListFences or LiftFence; see RegisterFenceServer.
//
// s is any grpc.ServiceRegistrar, so that drivers whose framework owns the
// *grpc.Server (csi-common's serve loop, for example) can register inside it.
func RegisterCapabilitiesServer(s grpc.ServiceRegistrar, caps Capabilities) {
	fencev1.RegisterFenceCapabilitiesServer(s, NewCapabilitiesServer(caps))
}

// Discover asks the driver behind conn which extension capabilities it
// implements. A driver that does not serve the extension answers
// UNIMPLEMENTED; Discover reports that as zero Capabilities and a nil error,
// because it simply means "no fence support". Any other failure is returned
// wrapped, with zero Capabilities: the caller must not assume support then.
func Discover(ctx context.Context, conn grpc.ClientConnInterface) (Capabilities, error) {
	resp, err := fencev1.NewFenceCapabilitiesClient(conn).GetFenceCapabilities(ctx, &fencev1.GetFenceCapabilitiesRequest{})
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return Capabilities{}, nil
		}
		return Capabilities{}, fmt.Errorf("discovering fence capabilities: %w", err)
	}
	return CapabilitiesFromList(resp.GetCapabilities()), nil
}
