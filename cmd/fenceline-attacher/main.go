// Command fenceline-attacher is a drop-in replacement for the kubernetes-csi
// external-attacher sidecar: same flags, finalizers, annotations and leader
// lease, plus fenced detaches from nodes known to be down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/app"
	"fenceline.io/fenceline/pkg/version"
)

func main() {
	os.Exit(run())
}

func run() int {
	opts := app.DefaultOptions()
	fs := flag.CommandLine
	standardflags.RegisterCommonFlags(fs)
	standardflags.AddAutomaxprocs(klog.Infof)
	fs.DurationVar(&opts.Resync, "resync", opts.Resync, "Resync interval of the controller.")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "Timeout for waiting for attaching or detaching the volume.")
	fs.DurationVar(&opts.RetryIntervalStart, "retry-interval-start", opts.RetryIntervalStart, "Initial retry interval of failed create volume or deletion. It doubles with each failure, up to retry-interval-max.")
	fs.DurationVar(&opts.RetryIntervalMax, "retry-interval-max", opts.RetryIntervalMax, "Maximum retry interval of failed create volume or deletion.")
	fs.IntVar(&opts.WorkerThreads, "worker-threads", opts.WorkerThreads, "Number of attacher worker threads.")
	fs.IntVar(&opts.MaxEntries, "max-entries", opts.MaxEntries, "Max entries per each page in volume lister call, 0 means no limit.")
	fs.StringVar(&opts.DefaultFSType, "default-fstype", opts.DefaultFSType, "The default filesystem type of the volume to publish. Defaults to empty string.")
	fs.DurationVar(&opts.ReconcileSync, "reconcile-sync", opts.ReconcileSync, "Resync interval of the VolumeAttachment reconciler.")
	fs.IntVar(&opts.MaxGRPCLogLength, "max-grpc-log-length", opts.MaxGRPCLogLength, "The maximum amount of characters logged for every grpc responses. Defaults to no limit.")

	featureGates := map[string]bool{}
	fs.Var(cliflag.NewMapStringBool(&featureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Fenceline has no features of its own behind gates; the logging gates of component-base are honoured.")
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logConfig := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logConfig, fs)
	flag.Parse()

	if standardflags.Configuration.ShowVersion {
		fmt.Println(os.Args[0], version.Version)
		return 0
	}
	if err := fg.SetFromMap(featureGates); err != nil {
		fmt.Fprintln(os.Stderr, "--feature-gates:", err)
		return 1
	}
	if err := logsapi.ValidateAndApply(logConfig, fg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer klog.Flush()

	sc := standardflags.Configuration
	opts.Kubeconfig = sc.KubeConfig
	opts.CSIAddress = sc.CSIAddress
	opts.LeaderElection = sc.LeaderElection
	opts.LeaderElectionNamespace = sc.LeaderElectionNamespace
	opts.LeaderElectionLeaseDuration = sc.LeaderElectionLeaseDuration
	opts.LeaderElectionRenewDeadline = sc.LeaderElectionRenewDeadline
	opts.LeaderElectionRetryPeriod = sc.LeaderElectionRetryPeriod
	opts.LeaderElectionLabels = sc.LeaderElectionLabels
	opts.KubeAPIQPS = sc.KubeAPIQPS
	opts.KubeAPIBurst = sc.KubeAPIBurst
	opts.HTTPEndpoint = sc.HttpEndpoint
	opts.MetricsAddress = sc.MetricsAddress
	opts.MetricsPath = sc.MetricsPath
	opts.ExitOnConnectionLoss = true

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("fenceline-attacher")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.Version)
	if sc.MetricsAddress != "" {
		logger.Info("--metrics-address is deprecated; use --http-endpoint")
	}
	if err := app.Run(ctx, opts); err != nil {
		logger.Error(err, "fenceline-attacher failed")
		return 1
	}
	return 0
}
