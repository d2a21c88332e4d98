package cli

import (
	"flag"
	"fmt"
	"strings"

	clientfeatures "k8s.io/client-go/features"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	// Registers --logging-format=json and its options.
	_ "k8s.io/component-base/logs/json/register"
	metricsfeatures "k8s.io/component-base/metrics/features"
)

// CommonFlags are the flags of every Fenceline binary that come from
// component-base: --feature-gates and the logging flags (-v, --vmodule,
// --logging-format, ...).
type CommonFlags struct {
	// Gate is what --feature-gates sets.
	Gate    featuregate.MutableVersionedFeatureGate
	Logging *logsapi.LoggingConfiguration
	values  map[string]bool
}

// NewCommonFlags registers the logging, metrics and client-go feature gates
// on gate (which may already hold the binary's own) and returns the flags
// that set them.
func NewCommonFlags(gate featuregate.MutableVersionedFeatureGate) (*CommonFlags, error) {
	if err := logsapi.AddFeatureGates(gate); err != nil {
		return nil, fmt.Errorf("register logging feature gates: %w", err)
	}
	if err := metricsfeatures.AddFeatureGates(gate); err != nil {
		return nil, fmt.Errorf("register metrics feature gates: %w", err)
	}
	// client-go's own gates (WatchList, ...) join the same gate and take
	// effect from it (see Apply), so --feature-gates=WatchList=false works
	// as in any Kubernetes component.
	if err := clientfeatures.AddVersionedFeaturesToExistingFeatureGates(clientGates{gate}); err != nil {
		return nil, fmt.Errorf("register client-go feature gates: %w", err)
	}
	return &CommonFlags{Gate: gate, Logging: logsapi.NewLoggingConfiguration(), values: map[string]bool{}}, nil
}

// AddFlags registers --feature-gates and the logging flags on fs.
func (c *CommonFlags) AddFlags(fs *flag.FlagSet) {
	fs.Var(cliflag.NewMapStringBool(&c.values), "feature-gates",
		"A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+strings.Join(c.Gate.KnownFeatures(), "\n"))
	logsapi.AddGoFlags(c.Logging, fs)
}

// Validate sets the gate from --feature-gates and checks the logging
// flags against it, without applying anything: a wrong value is a usage
// error found before the component touches the cluster.
func (c *CommonFlags) Validate() error {
	if err := c.Gate.SetFromMap(c.values); err != nil {
		return UsageError(fmt.Errorf("--feature-gates: %w", err))
	}
	if errs := logsapi.Validate(c.Logging, c.Gate, nil); len(errs) > 0 {
		return UsageError(fmt.Errorf("logging configuration: %w", errs.ToAggregate()))
	}
	return nil
}

// Apply makes the gates and logging flags take effect. It must run once,
// after Validate and before any metric is registered (so that
// NativeHistograms takes effect) or any client is created.
func (c *CommonFlags) Apply() error {
	metricsfeatures.ApplyFeatureGates(c.Gate)
	clientfeatures.ReplaceFeatureGates(clientGates{c.Gate})
	if err := logsapi.ValidateAndApply(c.Logging, c.Gate); err != nil {
		return UsageError(fmt.Errorf("logging configuration: %w", err))
	}
	// The standard library's log package writes through klog too.
	logs.InitLogs()
	return nil
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
