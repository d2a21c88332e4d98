package tgt_test

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/internal/sanitytest"
	"fenceline.io/fenceline/test/iscsi"
)

// TestSanityOnTgt runs csi-sanity against the driver on the tgt backend:
// serving volumes from a real target must not change what the CSI calls
// answer.
func TestSanityOnTgt(t *testing.T) {
	iscsi.RequireTgt(t)
	d, sc := sanitytest.Start(t, func(cfg *driver.Config, dir string) {
		cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
		cfg.NodeID = "sanity-node"
		cfg.MaxVolumesPerNode = 3
		cfg.Backend = driver.BackendTgt
	})
	sc.Address = d.Endpoint()
	sanity.Test(t, sc)
}
