package main

import (
	"flag"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/component/cli"
)

// config is the parsed command line.
type config struct {
	opts        app.Options
	showVersion bool
	common      *cli.CommonFlags
}

// parseFlags defines the upstream external-attacher's flags, with the same
// names and defaults, on fs, parses args and validates them: every error it
// returns is a usage error (exit code 2), found before anything touches the
// cluster. The common sidecar flags come from csi-lib-utils standardflags,
// which registers --metrics-path on the process-wide flag.CommandLine; fs
// must therefore be flag.CommandLine, and parseFlags may run once per
// process.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{opts: app.DefaultOptions()}
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
	common, err := newCommonFlags()
	if err != nil {
		return nil, err
	}
	c.common = common
	common.AddFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
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
	// Everything is checked before --version is honoured, so that
	// `--version` appended to a manifest's arguments proves they are valid.
	if err := common.Validate(); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, cli.UsageError(err)
	}
	return c, nil
}

// applyLogging applies --feature-gates (before any metric is registered,
// so that NativeHistograms takes effect), --logging-format, -v and friends.
func (c *config) applyLogging() error {
	return c.common.Apply()
}
