package sanitysplit

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/driver"
)

// TestSanitySplitSockets runs csi-sanity with the controller service on
// one socket (no node identity) and the node plugin of "node-1" on another,
// as --node-endpoint serves it. Publishing must go through the array to
// the node that the node socket reports in NodeGetInfo.
func TestSanitySplitSockets(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "controller.sock")
	cfg.NodeEndpoints = map[string]string{"node-1": "unix://" + filepath.Join(dir, "node-1.sock")}
	cfg.MaxVolumesPerNode = 2
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(d.Stop)

	sc := sanity.NewTestConfig()
	sc.Address = d.NodeEndpoint("node-1")
	sc.ControllerAddress = d.Endpoint()
	sc.TargetPath = filepath.Join(dir, "mount")
	sc.StagingPath = filepath.Join(dir, "staging")
	sc.IdempotentCount = 2
	sc.TestNodeVolumeAttachLimit = true
	sc.TestVolumeSize = 1 << 30
	sanity.Test(t, sc)
}
