package csiclient

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
)

// startMock runs the mock driver in-process on a unix socket and returns a
// Client connected to it.
func startMock(t *testing.T, mutate func(*driver.Config)) (*Client, *driver.Driver, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "c.sock")
	cfg.NodeID = "node-1"
	if mutate != nil {
		mutate(&cfg)
	}
	drv, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start mock driver: %v", err)
	}
	t.Cleanup(drv.Stop)
	conn, err := grpc.NewClient(drv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return New(conn), drv, ctx
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*driver.Config)
		want   Capabilities
	}{
		{
			name: "full driver with fence",
			want: Capabilities{ControllerService: true, PublishUnpublish: true, ListVolumesPublishedNodes: true,
				PublishReadOnly: true, SingleNodeMultiWriter: true},
		},
		{
			name:   "full driver without fence",
			mutate: func(c *driver.Config) { c.Fence = false },
			want: Capabilities{ControllerService: true, PublishUnpublish: true, ListVolumesPublishedNodes: true,
				PublishReadOnly: true, SingleNodeMultiWriter: true},
		},
		{
			name:   "minimal foreign driver",
			mutate: func(c *driver.Config) { c.Fence, c.MinimalController = false, true },
			want:   Capabilities{ControllerService: true, PublishUnpublish: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, ctx := startMock(t, tc.mutate)
			caps, err := c.Discover(ctx)
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			fence := tc.mutate == nil
			if caps.Fence.UnpublishFence != fence {
				t.Errorf("UnpublishFence = %v, want %v", caps.Fence.UnpublishFence, fence)
			}
			caps.Fence = tc.want.Fence
			if caps != tc.want {
				t.Errorf("capabilities = %+v, want %+v", caps, tc.want)
			}
			name, err := c.DriverName(ctx)
			if err != nil || name != driver.DefaultName {
				t.Errorf("DriverName = %q, %v; want %q", name, err, driver.DefaultName)
			}
		})
	}
}

func TestPublishUnpublishAndListPages(t *testing.T) {
	c, drv, ctx := startMock(t, nil)
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	var ids []string
	for i := range 5 {
		resp, err := csi.NewControllerClient(c.conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csi.VolumeCapability{capability},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetVolume().GetVolumeId())
	}
	if _, err := c.Publish(ctx, PublishRequest{VolumeID: ids[2], NodeID: "node-1", Capability: capability}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// Pages of two force the client to follow next tokens.
	published, err := c.PublishedNodes(ctx, 2)
	if err != nil {
		t.Fatalf("PublishedNodes: %v", err)
	}
	if len(published) != len(ids) {
		t.Errorf("volumes listed = %d, want %d", len(published), len(ids))
	}
	if !slices.Equal(published[ids[2]], []string{"node-1"}) || len(published[ids[0]]) != 0 {
		t.Errorf("published nodes = %v, want only %s on node-1", published, ids[2])
	}
	if err := c.Unpublish(ctx, ids[2], "node-1", nil, true); err != nil {
		t.Fatalf("fenced Unpublish: %v", err)
	}
	recs, err := audit.ReadFile(drv.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Fenced(), audit.OK()); n != 1 {
		t.Errorf("fenced unpublish calls seen by the driver = %d, want 1", n)
	}
}
