package driver_test

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/internal/sanitytest"
)

// TestSanity runs the csi-test sanity suite against the driver over a real
// unix socket, with the fence extension switched on (it must not disturb
// the standard behaviour) and an attachment limit so that the limit test
// runs too. Specs are skipped by csi-test only for capabilities the driver
// does not claim (snapshots, expansion, cloning, modify, health).
func TestSanity(t *testing.T) {
	d, sc := sanitytest.Start(t, func(cfg *driver.Config, dir string) {
		cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
		cfg.NodeID = "sanity-node"
		cfg.MaxVolumesPerNode = 3
	})
	sc.Address = d.Endpoint()
	sanity.Test(t, sc)
}
