package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsfeatures "k8s.io/component-base/metrics/features"
	// Registers --logging-format=json and its options, as upstream does.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/app"
)

// config is the parsed command line.
type config struct {
	opts         app.Options
	showVersion  bool
	logConfig    *logsapi.LoggingConfiguration
	featureGate  featuregate.MutableVersionedFeatureGate
	featureGates map[string]bool
}

// parseFlags defines the upstream external-attacher's flags, with the same
// names and defaults, on fs and parses args. The common sidecar flags come
// from csi-lib-utils standardflags, which registers --metrics-path on the
// process-wide flag.CommandLine; fs must therefore be flag.CommandLine, and
// parseFlags may run once per process.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{opts: app.DefaultOptions(), featureGates: map[string]bool{}}
	o := &c.opts
	standardflags.RegisterCommonFlags(fs)
	standardflags.AddAutomaxprocs(klog.Infof)
	fs.DurationVar(&o.Resync, "resync", o.Resync, "Resync interval of the controller.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "Timeout for waiting for attaching or detaching the volume.")
	fs.DurationVar(&o.RetryIntervalStart, "retry-interval-start", o.RetryIntervalStart, "Initial retry interval of failed attach or detach. It doubles with each failure, up to retry-interval-max.")
	fs.DurationVar(&o.RetryIntervalMax, "retry-interval-max", o.RetryIntervalMax, "Maximum retry interval of failed attach or detach.")
	fs.IntVar(&o.WorkerThreads, "worker-threads", o.WorkerThreads, "Number of attacher worker threads.")
	fs.IntVar(&o.MaxEntries, "max-entries", o.MaxEntries, "Max entries per each page in volume lister call, 0 means no limit.")
	fs.StringVar(&o.DefaultFSType, "default-fstype", o.DefaultFSType, "The default filesystem type of the volume to publish. Defaults to empty string.")
	fs.DurationVar(&o.ReconcileSync, "reconcile-sync", o.ReconcileSync, "Resync interval of the VolumeAttachment reconciler.")
	fs.IntVar(&o.MaxGRPCLogLength, "max-grpc-log-length", o.MaxGRPCLogLength, "The maximum amount of characters logged for every grpc responses. Defaults to no limit.")
	gate, err := newFeatureGate()
	if err != nil {
		return nil, err
	}
	c.featureGate = gate
	fs.Var(cliflag.NewMapStringBool(&c.featureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+strings.Join(gate.KnownFeatures(), "\n"))
	c.logConfig = logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c.logConfig, fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	sc := standardflags.Configuration
	c.showVersion = sc.ShowVersion
	o.Kubeconfig = sc.KubeConfig
	o.CSIAddress = sc.CSIAddress
	o.LeaderElection = sc.LeaderElection
	o.LeaderElectionNamespace = sc.LeaderElectionNamespace
	o.LeaderElectionLeaseDuration = sc.LeaderElectionLeaseDuration
	o.LeaderElectionRenewDeadline = sc.LeaderElectionRenewDeadline
	o.LeaderElectionRetryPeriod = sc.LeaderElectionRetryPeriod
	o.LeaderElectionLabels = sc.LeaderElectionLabels
	o.KubeAPIQPS = sc.KubeAPIQPS
	o.KubeAPIBurst = sc.KubeAPIBurst
	o.HTTPEndpoint = sc.HttpEndpoint
	o.MetricsAddress = sc.MetricsAddress
	o.MetricsPath = sc.MetricsPath
	if c.showVersion {
		return c, nil
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// applyLogging applies --feature-gates (before any metric is registered,
// so that NativeHistograms takes effect), --logging-format, -v and friends.
func (c *config) applyLogging() error {
	if err := c.featureGate.SetFromMap(c.featureGates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	metricsfeatures.ApplyFeatureGates(c.featureGate)
	if err := logsapi.ValidateAndApply(c.logConfig, c.featureGate); err != nil {
		return fmt.Errorf("logging configuration: %w", err)
	}
	return nil
}
