package main

import (
	"fmt"

	// Registers the generic API server gates on utilfeature's gate, as in
	// upstream's binary, so that any of them in an upstream command line
	// is accepted.
	_ "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/cli"
)

// The feature gates upstream's external-attacher v4.13 declares itself, with
// its defaults. Neither changes what fenceline-attacher does; both are
// accepted so that an upstream Deployment's --feature-gates never makes the
// image swap crash-loop (see docs/attacher.md, "Feature gates"):
//   - ReleaseLeaderElectionOnExit (alpha, off): upstream releases its lease
//     on SIGTERM once its workers stopped; fenceline-attacher always
//     releases it whenever its work stops (see pkg/component/leader).
//   - MutableCSINodeAllocatableCount (GA, on): upstream then records the
//     gRPC code in attachError/detachError; fenceline-attacher always does.
const (
	releaseLeaderElectionOnExit    featuregate.Feature = "ReleaseLeaderElectionOnExit"
	mutableCSINodeAllocatableCount featuregate.Feature = "MutableCSINodeAllocatableCount"
)

// newCommonFlags returns --feature-gates and the logging flags: the gates
// upstream accepts (the generic API server and client-go gates, plus its
// own two), and component-base's logging and metrics gates, which Fenceline
// honours on top. It uses the process-wide utilfeature gate and may run
// once per process.
func newCommonFlags() (*cli.CommonFlags, error) {
	gate := utilfeature.DefaultMutableFeatureGate
	if err := gate.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		releaseLeaderElectionOnExit:    {Default: false, PreRelease: featuregate.Alpha},
		mutableCSINodeAllocatableCount: {Default: true, PreRelease: featuregate.GA},
	}); err != nil {
		return nil, fmt.Errorf("register upstream's feature gates: %w", err)
	}
	return cli.NewCommonFlags(gate)
}
