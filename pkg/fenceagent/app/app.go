// Package app runs fenceline-fence-agent, the only Fenceline component that
// holds BMC credentials: the FenceTarget probe and the FencingRequest
// executor, with informers on the fencing API, Nodes (read only) and the
// Secrets of its own namespace, leader election, and the metrics and
// health endpoints. The binary in
// cmd/fenceline-fence-agent only parses flags and calls Run; tests call Run
// in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"

	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/component/runner"
	"fenceline.io/fenceline/pkg/fenceagent/executor"
	"fenceline.io/fenceline/pkg/fenceagent/probe"
)

// Component is the name in Events, the user agent and the Lease.
const Component = "fenceline-fence-agent"

// Namespace is where the agent runs and the only namespace whose Secrets
// it reads: every credentials Secret lives there.
const Namespace = "fenceline-system"

// Options configures Run. DefaultOptions gives the flag defaults.
type Options struct {
	// Options are the API budget, leader-election and HTTP settings.
	runner.Options
	// ProbeInterval is the time between two probes of a FenceTarget;
	// ProbeTimeout bounds one endpoint's query.
	ProbeInterval, ProbeTimeout time.Duration
	// Workers probe targets in parallel.
	Workers int
	// FenceWorkers execute FencingRequests in parallel.
	FenceWorkers int
	// Resync is the informers' resync period.
	Resync time.Duration
	// CredentialsNamespace is the namespace of the credential Secrets.
	CredentialsNamespace string

	// FeatureGate is --feature-gates.
	FeatureGate featuregate.FeatureGate
}

// DefaultOptions returns the defaults of every flag.
func DefaultOptions() Options {
	return Options{
		Options:              runner.DefaultOptions(Component, Namespace, 20, 50),
		ProbeInterval:        probe.DefaultInterval,
		ProbeTimeout:         probe.DefaultTimeout,
		Workers:              4,
		FenceWorkers:         4,
		Resync:               10 * time.Minute,
		CredentialsNamespace: Namespace,
	}
}

// Validate checks the options. The binary calls it before it loads its
// kubeconfig, so that a bad value is a usage error even with no cluster.
func (o Options) Validate() error {
	var errs []error
	if o.ProbeInterval < time.Second {
		errs = append(errs, fmt.Errorf("--probe-interval must be at least 1s, got %v", o.ProbeInterval))
	}
	if o.ProbeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--probe-timeout must be positive, got %v", o.ProbeTimeout))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.FenceWorkers < 1 {
		errs = append(errs, fmt.Errorf("--fence-workers must be at least 1, got %d", o.FenceWorkers))
	}
	if o.Resync <= 0 {
		errs = append(errs, fmt.Errorf("--resync must be positive, got %v", o.Resync))
	}
	if o.CredentialsNamespace == "" {
		errs = append(errs, errors.New("--credentials-namespace must be set"))
	}
	if err := o.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run runs the probe and the executor until ctx is cancelled (nil error)
// or leadership is lost (error). With leader election they run only while
// this replica leads.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	base, err := kubeclient.Config(kubeclient.Options{Base: cfg, QPS: opts.KubeAPIQPS, Burst: opts.KubeAPIBurst, UserAgent: Component})
	if err != nil {
		return err
	}
	reg, err := runner.Registry(opts.Registry)
	if err != nil {
		return err
	}
	pm, err := probe.NewMetrics(reg)
	if err != nil {
		return err
	}
	em, err := executor.NewMetrics(reg)
	if err != nil {
		return err
	}
	return runner.Run(ctx, opts.Config(base, Component, reg), func(ctx context.Context) error {
		return runAgent(ctx, base, metrics{probe: pm, executor: em}, opts)
	})
}
