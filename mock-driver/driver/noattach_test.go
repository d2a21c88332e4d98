package driver_test

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/mock-driver/driver"
)

// TestNoAttachDriver: a driver without an attach step (attachRequired:
// false) advertises no PUBLISH_UNPUBLISH_VOLUME, and a node stages and
// writes to a volume that was never published to it.
func TestNoAttachDriver(t *testing.T) {
	w := newWorld(t, func(c *driver.Config) { c.NoAttach = true })
	caps, err := w.ctrl.ControllerGetCapabilities(w.ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps.GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME {
			t.Fatal("a driver without an attach step advertises PUBLISH_UNPUBLISH_VOLUME")
		}
	}
	id := w.createVolume("pvc-1")
	if _, err := w.node("node-a").NodeStageVolume(w.ctx, &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: w.stagingPath("node-a"), VolumeCapability: rwoCap(),
	}); err != nil {
		t.Fatalf("NodeStageVolume without ControllerPublishVolume: %v", err)
	}
	if err := client.Write(w.ctx, w.nodes["node-a"], id, []byte("data")); err != nil {
		t.Fatalf("write from the node that staged the volume: %v", err)
	}
}
