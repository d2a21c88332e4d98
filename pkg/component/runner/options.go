package runner

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"fenceline.io/fenceline/pkg/component/leader"
)

// Options are the settings every controller process shares: its API
// budget, leader election and HTTP endpoint. A component's own Options
// embed them, so that the flags, defaults and checks are one copy.
type Options struct {
	// KubeAPIQPS and KubeAPIBurst limit each client.
	KubeAPIQPS   float32
	KubeAPIBurst int

	// LeaderElection enables leader election on the Lease LeaseName in
	// LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaseName               string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	// Identity is this replica's leader-election identity (default: host
	// name plus a random suffix).
	Identity string

	// HTTPEndpoint, when set, serves MetricsPath and /healthz there.
	HTTPEndpoint string
	MetricsPath  string
	// Registry receives the metrics; nil creates a fresh one.
	Registry *prometheus.Registry
}

// DefaultOptions are kube-controller-manager's leader-election timings,
// the Lease named after the component in namespace, and the given budget.
func DefaultOptions(component, namespace string, qps float32, burst int) Options {
	return Options{
		KubeAPIQPS:              qps,
		KubeAPIBurst:            burst,
		LeaderElectionNamespace: namespace,
		LeaseName:               component,
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		MetricsPath:             "/metrics",
	}
}

// Validate checks the shared settings.
func (o Options) Validate() error {
	var errs []error
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("--leader-election-namespace must be set with --leader-election"))
	}
	if err := o.Leader().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Leader returns the --leader-election* settings.
func (o Options) Leader() leader.Options {
	return leader.Options{
		Enabled:       o.LeaderElection,
		Namespace:     o.LeaderElectionNamespace,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
	}
}

// Config is the Run configuration of these options for component.
func (o Options) Config(base *rest.Config, component string, metrics prometheus.Gatherer) Config {
	return Config{
		Base: base, Component: component,
		LeaderElection: o.LeaderElection, Leader: o.Leader(), LeaseName: o.LeaseName, Identity: o.Identity,
		HTTPEndpoint: o.HTTPEndpoint, MetricsPath: o.MetricsPath, Metrics: metrics,
	}
}

// AddFlags registers the leader-election, HTTP and API-budget flags
// (their help texts from qpsHelp and burstHelp, which say whose clients
// share the budget). Call the returned function after parsing, before
// Validate, to copy the parsed values in.
func (o *Options) AddFlags(fs *flag.FlagSet, qpsHelp, burstHelp string) (parsed func()) {
	qps := fs.Float64("kube-api-qps", float64(o.KubeAPIQPS), qpsHelp)
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, burstHelp)
	le := o.Leader()
	le.AddFlags(fs)
	fs.StringVar(&o.HTTPEndpoint, "http-endpoint", "", "host:port to serve metrics and /healthz on. Empty: disabled.")
	fs.StringVar(&o.MetricsPath, "metrics-path", o.MetricsPath, "HTTP path of the Prometheus metrics.")
	return func() {
		o.KubeAPIQPS = float32(*qps)
		o.LeaderElection, o.LeaderElectionNamespace = le.Enabled, le.Namespace
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = le.LeaseDuration, le.RenewDeadline, le.RetryPeriod
	}
}
