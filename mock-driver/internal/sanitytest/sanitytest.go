// Package sanitytest starts the mock driver for a csi-sanity run, for the
// tests that run the suite against its different socket layouts.
package sanitytest

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/driver"
)

// Start starts the driver with its state under a temporary directory, once
// configure has set the sockets and limits (sockets go under the dir it is
// given), and stops it when the test ends. It returns the driver and a
// csi-sanity configuration with the mount and staging paths under the same
// directory, the attachment limit test switched on and idempotency checked;
// the caller points it at the driver's sockets.
func Start(t *testing.T, configure func(cfg *driver.Config, dir string)) (*driver.Driver, sanity.TestConfig) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	configure(&cfg, dir)
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start driver: %v", err)
	}
	t.Cleanup(d.Stop)

	sc := sanity.NewTestConfig()
	sc.TargetPath = filepath.Join(dir, "mount")
	sc.StagingPath = filepath.Join(dir, "staging")
	sc.IdempotentCount = 2
	sc.TestNodeVolumeAttachLimit = true
	sc.TestVolumeSize = 1 << 30
	return d, sc
}
