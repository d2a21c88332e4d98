package driver_test

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/driver"
)

// TestSanity runs the csi-test sanity suite against the driver over a real
// unix socket, with the fence extension switched on (it must not disturb
// the standard behaviour) and an attachment limit so that the limit test
// runs too. Specs are skipped by csi-test only for capabilities the driver
// does not claim (snapshots, expansion, cloning, modify, health).
func TestSanity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	cfg.NodeID = "sanity-node"
	cfg.MaxVolumesPerNode = 3
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(d.Stop)

	sc := sanity.NewTestConfig()
	sc.Address = d.Endpoint()
	sc.TargetPath = filepath.Join(dir, "mount")
	sc.StagingPath = filepath.Join(dir, "staging")
	sc.IdempotentCount = 2
	sc.TestNodeVolumeAttachLimit = true
	sc.TestVolumeSize = 1 << 30
	sanity.Test(t, sc)
}
