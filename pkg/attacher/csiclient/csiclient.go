// Package csiclient is the attacher's thin client of a CSI driver's
// controller service: capability discovery, ControllerPublishVolume,
// ControllerUnpublishVolume (optionally fenced) and ListVolumes. It keeps no
// state besides the connection; policy lives in the controller package.
package csiclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"

	"fenceline.io/fenceline/pkg/fence"
)

// Capabilities is what the attacher needs to know about a driver.
type Capabilities struct {
	// ControllerService is true when the plugin serves the controller service.
	ControllerService bool
	// PublishUnpublish is true for PUBLISH_UNPUBLISH_VOLUME. Without it (or
	// without ControllerService) attach is trivial: mark attached, no
	// finalizer, no CSI call.
	PublishUnpublish bool
	// ListVolumesPublishedNodes is true when the driver has both LIST_VOLUMES
	// and LIST_VOLUMES_PUBLISHED_NODES, which the reconciler needs.
	ListVolumesPublishedNodes bool
	// PublishReadOnly is true for PUBLISH_READONLY. Without it
	// ControllerPublishVolume must be sent with readonly=false.
	PublishReadOnly bool
	// SingleNodeMultiWriter is true for SINGLE_NODE_MULTI_WRITER; it changes
	// how ReadWriteOncePod maps to a CSI access mode.
	SingleNodeMultiWriter bool
	// Fence is what the driver advertises through the fence extension.
	Fence fence.Capabilities
}

// NeedsAttach reports whether VolumeAttachments need a real
// ControllerPublishVolume, as opposed to being marked attached at once.
func (c Capabilities) NeedsAttach() bool { return c.ControllerService && c.PublishUnpublish }

// Client talks to one CSI driver.
type Client struct {
	conn *grpc.ClientConn
	ctrl csi.ControllerClient
}

// New returns a Client using conn, which the caller owns and closes.
func New(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, ctrl: csi.NewControllerClient(conn)}
}

// DriverName returns the driver's name from GetPluginInfo.
func (c *Client) DriverName(ctx context.Context) (string, error) {
	name, err := rpc.GetDriverName(ctx, c.conn)
	if err != nil {
		return "", fmt.Errorf("get CSI driver name: %w", err)
	}
	return name, nil
}

// Discover asks the driver for its plugin, controller and fence
// capabilities.
func (c *Client) Discover(ctx context.Context) (Capabilities, error) {
	var caps Capabilities
	plugin, err := rpc.GetPluginCapabilities(ctx, c.conn)
	if err != nil {
		return caps, fmt.Errorf("get plugin capabilities: %w", err)
	}
	caps.ControllerService = plugin[csi.PluginCapability_Service_CONTROLLER_SERVICE]
	if caps.ControllerService {
		ctrl, err := rpc.GetControllerCapabilities(ctx, c.conn)
		if err != nil {
			return caps, fmt.Errorf("get controller capabilities: %w", err)
		}
		caps.PublishUnpublish = ctrl[csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME]
		caps.ListVolumesPublishedNodes = ctrl[csi.ControllerServiceCapability_RPC_LIST_VOLUMES] &&
			ctrl[csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES]
		caps.PublishReadOnly = ctrl[csi.ControllerServiceCapability_RPC_PUBLISH_READONLY]
		caps.SingleNodeMultiWriter = ctrl[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER]
	}
	caps.Fence, err = fence.Discover(ctx, c.conn)
	if err != nil {
		return caps, fmt.Errorf("discover fence capabilities: %w", err)
	}
	return caps, nil
}

// PublishRequest is the input of Publish.
type PublishRequest struct {
	VolumeID      string
	NodeID        string
	Capability    *csi.VolumeCapability
	ReadOnly      bool
	Secrets       map[string]string
	VolumeContext map[string]string
}

// Publish calls ControllerPublishVolume and returns the publish context.
func (c *Client) Publish(ctx context.Context, r PublishRequest) (map[string]string, error) {
	resp, err := c.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId:         r.VolumeID,
		NodeId:           r.NodeID,
		VolumeCapability: r.Capability,
		Readonly:         r.ReadOnly,
		Secrets:          r.Secrets,
		VolumeContext:    r.VolumeContext,
	})
	if err != nil {
		return nil, err
	}
	return resp.GetPublishContext(), nil
}

// Unpublish calls ControllerUnpublishVolume, with the fence extension's
// fence=true when fenced is set.
func (c *Client) Unpublish(ctx context.Context, volumeID, nodeID string, secrets map[string]string, fenced bool) error {
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID, Secrets: secrets}
	if fenced {
		fence.SetFence(req, true)
	}
	_, err := c.ctrl.ControllerUnpublishVolume(ctx, req)
	return err
}

// ErrTooManyPages is returned when ListVolumes keeps returning next tokens.
var ErrTooManyPages = errors.New("ListVolumes returned too many pages")

// PublishedNodes lists every volume with the nodes the driver says it is
// published to, following next tokens. maxEntries is passed to the driver
// as max_entries (0: driver's choice).
func (c *Client) PublishedNodes(ctx context.Context, maxEntries int32) (map[string][]string, error) {
	out := map[string][]string{}
	token := ""
	for page := 0; ; page++ {
		if page > 100000 {
			return nil, ErrTooManyPages
		}
		resp, err := c.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: maxEntries, StartingToken: token})
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		for _, e := range resp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			out[id] = append(out[id], e.GetStatus().GetPublishedNodeIds()...)
		}
		token = resp.GetNextToken()
		if token == "" {
			return out, nil
		}
	}
}
