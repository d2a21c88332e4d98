package main

import (
	"errors"
	"flag"
	"fmt"

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
	// warnings are what the command line asks that upstream accepts but
	// that is unwise or ignored; logged once logging is set up.
	warnings []string
}

// parseFlags defines the upstream external-attacher's flags, with the same
// names and defaults, on fs, parses args and validates them, before anything
// touches the cluster, with upstream's exit codes: a flag that does not parse
// is a usage error (2), a combination upstream rejects after parsing a
// failure (1); what upstream accepts is accepted, with a warning where it is
// unwise. The common sidecar flags come from csi-lib-utils standardflags,
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
	// Fenceline's own; upstream has no such flag and records no Event.
	fs.DurationVar(&o.StorageFenceInterval, "storage-fence-interval", o.StorageFenceInterval, "How often the driver's fences (ListFences, when it advertises LIST_FENCES) are read and published as StorageFence objects, and after each fenced detach; operators lift them with kubectl fenceline lift-fence. 0 publishes none.")
	fs.BoolVar(&o.AttachEvents, "attach-events", o.AttachEvents, "Record a Normal Attached Event on the VolumeAttachment for every successful attach, and a Normal Detached Event for every plain detach. Off by default: the attach/detach controller records SuccessfulAttachVolume on the pod already, and every Event is a write to the API server. Fenced detaches and failures are always recorded.")
	// Fenceline's own: the lanes that keep a failover ahead of routine
	// work (docs/attacher.md, "Queues and lanes"). 0 takes upstream's
	// flag of the same job, so a manifest without them gets its values.
	fs.IntVar(&o.DetachWorkerThreads, "detach-worker-threads", o.DetachWorkerThreads, "Number of worker threads for routine detaches, which have a queue of their own. 0 (default) means --worker-threads.")
	fs.IntVar(&o.FailoverWorkerThreads, "failover-worker-threads", o.FailoverWorkerThreads, "Number of worker threads for failover work (detaches from cut-off nodes and the attaches that replace them), which has a queue of its own. 0 (default) means --worker-threads.")
	fs.Float64Var(&o.FailoverKubeAPIQPS, "failover-kube-api-qps", o.FailoverKubeAPIQPS, "QPS of the client that makes failover work's API requests, apart from --kube-api-qps so that routine work cannot use it up. 0 (default) means --kube-api-qps.")
	fs.IntVar(&o.FailoverKubeAPIBurst, "failover-kube-api-burst", o.FailoverKubeAPIBurst, "Burst of the client that makes failover work's API requests. 0 (default) means --kube-api-burst.")
	common, err := newCommonFlags()
	if err != nil {
		return nil, err
	}
	c.common = common
	common.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, cli.UsageError(err)
	}
	// Upstream ignores positional arguments (a manifest may carry one by
	// mistake): so does the drop-in, and says so.
	if fs.NArg() > 0 {
		c.warnings = append(c.warnings, fmt.Sprintf("positional arguments %q are ignored, as upstream ignores them: flags take the form --name=value", fs.Args()))
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
	// Upstream rejects these after parsing, with exit code 1, not 2.
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c.warnings = append(c.warnings, o.Warnings()...)
	return c, nil
}

// applyLogging applies --feature-gates (before any metric is registered,
// so that NativeHistograms takes effect), --logging-format, -v and friends.
func (c *config) applyLogging() error {
	return c.common.Apply()
}
