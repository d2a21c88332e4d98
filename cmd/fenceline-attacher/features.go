package main

import (
	"fmt"

	// Registers the generic API server gates on utilfeature's gate, as in
	// upstream's binary, so that any of them in an upstream command line
	// is accepted.
	_ "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
)

// The feature gates upstream's external-attacher v4.13 declares itself, with
// its defaults. Neither changes what fenceline-attacher does; both are
// accepted so that an upstream Deployment's --feature-gates never makes the
// image swap crash-loop (see docs/attacher.md, "Feature gates"):
//   - ReleaseLeaderElectionOnExit (alpha, off): upstream releases its lease
//     on SIGTERM once its workers stopped; fenceline-attacher always
//     releases it on a clean exit.
//   - MutableCSINodeAllocatableCount (GA, on): upstream then records the
//     gRPC code in attachError/detachError; fenceline-attacher always does.
const (
	releaseLeaderElectionOnExit    featuregate.Feature = "ReleaseLeaderElectionOnExit"
	mutableCSINodeAllocatableCount featuregate.Feature = "MutableCSINodeAllocatableCount"
)

// newFeatureGate returns the gate behind --feature-gates: the same set
// upstream accepts (the generic API server and client-go gates, plus its
// own two), and component-base's logging gates, which Fenceline honours on
// top. It uses the process-wide utilfeature gate and may run once per
// process.
func newFeatureGate() (featuregate.MutableVersionedFeatureGate, error) {
	gate := utilfeature.DefaultMutableFeatureGate
	if err := gate.Add(map[featuregate.Feature]featuregate.FeatureSpec{
		releaseLeaderElectionOnExit:    {Default: false, PreRelease: featuregate.Alpha},
		mutableCSINodeAllocatableCount: {Default: true, PreRelease: featuregate.GA},
	}); err != nil {
		return nil, fmt.Errorf("register upstream's feature gates: %w", err)
	}
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return nil, fmt.Errorf("register logging feature gates: %w", err)
	}
	if err := metricsfeatures.AddFeatureGates(gate); err != nil {
		return nil, fmt.Errorf("register metrics feature gates: %w", err)
	}
	// client-go's own gates (WatchList, ...) join the same gate and take
	// effect from it, so --feature-gates=WatchList=false works as upstream.
	adapter := clientGates{gate}
	if err := clientfeatures.AddVersionedFeaturesToExistingFeatureGates(adapter); err != nil {
		return nil, fmt.Errorf("register client-go feature gates: %w", err)
	}
	clientfeatures.ReplaceFeatureGates(adapter)
	return gate, nil
}

// clientGates lets client-go register its gates on, and read them from, a
// component-base gate: client-go declares its own copies of the feature
// types so that it does not depend on component-base.
type clientGates struct {
	gate featuregate.MutableVersionedFeatureGate
}

// Enabled implements clientfeatures.Gates.
func (c clientGates) Enabled(f clientfeatures.Feature) bool {
	return c.gate.Enabled(featuregate.Feature(f))
}

// AddVersioned implements clientfeatures.VersionedRegistry.
func (c clientGates) AddVersioned(in map[clientfeatures.Feature]clientfeatures.VersionedSpecs) error {
	out := make(map[featuregate.Feature]featuregate.VersionedSpecs, len(in))
	for name, specs := range in {
		converted := make(featuregate.VersionedSpecs, 0, len(specs))
		for _, s := range specs {
			spec := featuregate.FeatureSpec{Default: s.Default, LockToDefault: s.LockToDefault, Version: s.Version}
			switch s.PreRelease {
			case clientfeatures.Alpha:
				spec.PreRelease = featuregate.Alpha
			case clientfeatures.Beta:
				spec.PreRelease = featuregate.Beta
			case clientfeatures.Deprecated:
				spec.PreRelease = featuregate.Deprecated
			default:
				spec.PreRelease = featuregate.GA
			}
			converted = append(converted, spec)
		}
		out[featuregate.Feature(name)] = converted
	}
	return c.gate.AddVersioned(out)
}
