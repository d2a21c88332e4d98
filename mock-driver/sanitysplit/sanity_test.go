package sanitysplit

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/internal/sanitytest"
)

// TestSanitySplitSockets runs csi-sanity with the controller service on
// one socket (no node identity) and the node plugin of "node-1" on another,
// as --node-endpoint serves it. Publishing must go through the array to
// the node that the node socket reports in NodeGetInfo.
func TestSanitySplitSockets(t *testing.T) {
	d, sc := sanitytest.Start(t, func(cfg *driver.Config, dir string) {
		cfg.Endpoint = "unix://" + filepath.Join(dir, "controller.sock")
		cfg.NodeEndpoints = map[string]string{"node-1": "unix://" + filepath.Join(dir, "node-1.sock")}
		cfg.MaxVolumesPerNode = 2
	})
	sc.Address = d.NodeEndpoint("node-1")
	sc.ControllerAddress = d.Endpoint()
	sanity.Test(t, sc)
}
