// Command fenceline-controller is the pod-GC companion of the Fenceline
// attacher: it force-deletes pods stuck on dead nodes (KEP-2268
// out-of-service, safe-detach quarantine, force eviction) so that their
// volumes can be detached, fenced and attached elsewhere.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/version"
)

// listFlag is a comma-separated list flag.
type listFlag struct{ items *[]string }

func (l listFlag) String() string {
	if l.items == nil {
		return ""
	}
	return strings.Join(*l.items, ",")
}

func (l listFlag) Set(v string) error {
	*l.items = strings.Split(v, ",")
	return nil
}

func main() {
	opts := app.DefaultOptions()
	fs := flag.CommandLine
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig. Empty: in-cluster configuration.")
	qps := fs.Float64("kube-api-qps", float64(opts.KubeAPIQPS), "QPS to use while talking with the API server.")
	fs.IntVar(&opts.KubeAPIBurst, "kube-api-burst", opts.KubeAPIBurst, "Burst to use while talking with the API server; sized so that a node's worth of force deletions is not throttled.")
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	fs.Var(listFlag{&opts.Controllers}, "controllers", fmt.Sprintf(
		"Controllers to run: '*' enables all that are on by default, 'name' enables one, '-name' disables one. Known: %s. Off by default: %s.",
		strings.Join(app.KnownControllers, ", "), strings.Join(app.DisabledByDefault, ", ")))
	fs.BoolVar(&opts.RemoveOutOfServiceTaint, "remove-out-of-service-taint", false,
		"Remove node.kubernetes.io/out-of-service once the node is Ready after a reboot (boot ID changed), no pod is terminating on it and no VolumeAttachment remains.")
	fs.DurationVar(&opts.QuarantineDelay, "quarantine-delay", opts.QuarantineDelay,
		"How long a node's Ready condition must not have been True before quarantine force-deletes pods of safe-detach drivers on it.")
	fs.DurationVar(&opts.QuarantineLiftDelay, "quarantine-lift-delay", opts.QuarantineLiftDelay,
		"How long a quarantined node must be Ready before the quarantine may be lifted, so that its kubelet has reported the volumes it still has mounted.")
	fs.DurationVar(&opts.ForceEvictionReadyGrace, "force-eviction-ready-grace", opts.ForceEvictionReadyGrace,
		"How long a force-eviction taint on a node that is still Ready waits for the node to be noticed dead before it is removed as unneeded, and how recently the node's Lease (kube-node-lease) must have been renewed for its kubelet to count as alive: a NotReady node whose Lease renews within it is not evicted (match kube-controller-manager's --node-monitor-grace-period).")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "Decide and log (and record Events), but change nothing.")
	fs.IntVar(&opts.Workers, "workers", opts.Workers, "Workers per controller.")
	fs.DurationVar(&opts.Resync, "resync", opts.Resync, "Informer resync period: a safety net behind the event-driven reactions.")
	fs.BoolVar(&opts.LeaderElection, "leader-election", false, "Enable leader election (run several replicas).")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", opts.LeaderElectionNamespace, "Namespace of the leader-election Lease.")
	fs.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", opts.LeaseDuration, "Leader-election lease duration.")
	fs.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", opts.RenewDeadline, "Leader-election renew deadline.")
	fs.DurationVar(&opts.RetryPeriod, "leader-election-retry-period", opts.RetryPeriod, "Leader-election retry period.")
	fs.StringVar(&opts.HTTPEndpoint, "http-endpoint", "", "host:port to serve metrics and /healthz on. Empty: disabled.")
	fs.StringVar(&opts.MetricsPath, "metrics-path", opts.MetricsPath, "HTTP path of the Prometheus metrics.")

	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logCfg := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(logCfg, fs)
	logs.InitLogs()
	flag.Parse()
	if *showVersion {
		fmt.Println(os.Args[0], version.Version)
		return
	}
	if err := logsapi.ValidateAndApply(logCfg, fg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer logs.FlushLogs()
	opts.KubeAPIQPS = float32(*qps)
	if err := run(*kubeconfig, opts); err != nil {
		klog.Background().Error(err, "fenceline-controller failed")
		logs.FlushLogs()
		os.Exit(1)
	}
}

func run(kubeconfig string, opts app.Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("fenceline-controller")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting", "version", version.Version)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	return app.Run(ctx, cfg, opts)
}
