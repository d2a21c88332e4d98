// Package app runs fenceline-controller: it builds the shared informers,
// the enabled controllers (from the Controllers table), each with its own
// client and event recorder, metrics and health endpoints and leader
// election. The binary in cmd/fenceline-controller only parses
// flags and calls Run; tests call Run in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/component/leader"
	"fenceline.io/fenceline/pkg/component/runner"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/outofservice"
	"fenceline.io/fenceline/pkg/controller/quarantine"
)

// Component is the name in Events, the field manager and the lease.
const Component = "fenceline-controller"

// Options configures Run. DefaultOptions gives the flag defaults.
type Options struct {
	// Controllers is the --controllers list ("*", "name", "-name").
	Controllers []string
	// RemoveOutOfServiceTaint enables the out-of-service taint removal
	// controller (same as naming it in Controllers).
	RemoveOutOfServiceTaint bool
	// QuarantineDelay is how long a node must be NotReady before
	// quarantine acts.
	QuarantineDelay time.Duration
	// QuarantineLiftDelay is how long a quarantined node must be Ready
	// before the quarantine may be lifted.
	QuarantineLiftDelay time.Duration
	// ForceEvictionReadyGrace is how long a force-eviction taint on a node
	// that is still Ready waits for the node to be noticed dead, and how
	// recent a node Lease renewal must be to count as a live kubelet.
	ForceEvictionReadyGrace time.Duration
	// DryRun decides and logs but changes nothing.
	DryRun bool
	// Workers is the number of workers per controller.
	Workers int
	// Resync is the informers' resync period: the safety net behind the
	// event-driven reactions.
	Resync time.Duration
	// KubeAPIQPS and KubeAPIBurst limit each client: every controller has
	// its own, as do the shared informers, leader election and each
	// controller's Events. A node's worth of force deletions costs three
	// requests per pod (the node re-read for the write-time re-check,
	// status, delete), so the burst is sized for a couple of full nodes at
	// once. The API server's priority and fairness still protects the
	// server.
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
	// FeatureGate is --feature-gates; a controller whose Descriptor names
	// a gate runs only when it is enabled there (nil: such controllers
	// are off).
	FeatureGate featuregate.FeatureGate
}

// DefaultOptions returns the defaults of every flag.
func DefaultOptions() Options {
	return Options{
		Controllers:             []string{"*"},
		QuarantineDelay:         quarantine.DefaultDelay,
		QuarantineLiftDelay:     quarantine.DefaultLiftDelay,
		ForceEvictionReadyGrace: forceeviction.DefaultReadyGrace,
		Workers:                 4,
		Resync:                  5 * time.Minute,
		KubeAPIQPS:              100,
		KubeAPIBurst:            500,
		LeaderElectionNamespace: "fenceline-system",
		LeaseName:               Component,
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		MetricsPath:             "/metrics",
	}
}

// Validate checks the options. The binary calls it before it loads its
// kubeconfig, so that a bad value is a usage error even with no cluster.
func (o Options) Validate() error {
	var errs []error
	if _, err := EnabledControllers(o.Controllers, o.FeatureGate); err != nil {
		errs = append(errs, err)
	}
	if o.QuarantineDelay < 0 || o.QuarantineLiftDelay < 0 || o.ForceEvictionReadyGrace < 0 {
		errs = append(errs, fmt.Errorf("--quarantine-delay, --quarantine-lift-delay and --force-eviction-ready-grace must not be negative, got %s, %s and %s",
			o.QuarantineDelay, o.QuarantineLiftDelay, o.ForceEvictionReadyGrace))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.Resync <= 0 {
		errs = append(errs, fmt.Errorf("--resync must be positive, got %v", o.Resync))
	}
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("--leader-election-namespace must be set with --leader-election"))
	}
	if err := o.leaderOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// leaderOptions are the --leader-election* flags.
func (o Options) leaderOptions() leader.Options {
	return leader.Options{
		Enabled:       o.LeaderElection,
		Namespace:     o.LeaderElectionNamespace,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
	}
}

// Run runs the enabled controllers until ctx is cancelled (nil error),
// leadership is lost or the controllers fail (error). With leader election
// the controllers run only while this replica leads, and the Lease is given
// up whenever they stop (see pkg/component/leader).
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	enabled, _ := EnabledControllers(opts.Controllers, opts.FeatureGate)
	if opts.RemoveOutOfServiceTaint {
		enabled[outofservice.Name] = true
	}
	base, err := kubeclient.Config(kubeclient.Options{Base: cfg, QPS: opts.KubeAPIQPS, Burst: opts.KubeAPIBurst, UserAgent: Component})
	if err != nil {
		return err
	}
	reg, err := runner.Registry(opts.Registry)
	if err != nil {
		return err
	}
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	return runner.Run(ctx, runner.Config{
		Base: base, Component: Component,
		LeaderElection: opts.LeaderElection, Leader: opts.leaderOptions(), LeaseName: opts.LeaseName, Identity: opts.Identity,
		HTTPEndpoint: opts.HTTPEndpoint, MetricsPath: opts.MetricsPath, Metrics: reg,
	}, func(ctx context.Context) error {
		return runControllers(ctx, base, m, opts, enabled)
	})
}
