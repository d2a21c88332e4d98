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
	"fenceline.io/fenceline/pkg/component/runner"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/outofservice"
)

// Component is the name in Events, the field manager and the lease.
const Component = "fenceline-controller"

// Options configures Run. DefaultOptions gives the flag defaults.
type Options struct {
	// Options are the API budget, leader-election and HTTP settings.
	// KubeAPIQPS and KubeAPIBurst limit each client: every controller has
	// its own, as do the shared informers, leader election and each
	// controller's Events. A node's worth of force deletions costs three
	// requests per pod (the node re-read for the write-time re-check,
	// status, delete), so the burst is sized for a couple of full nodes at
	// once. The API server's priority and fairness still protects it.
	runner.Options
	// Controllers is the --controllers list ("*", "name", "-name").
	Controllers []string
	// RemoveOutOfServiceTaint enables the out-of-service taint removal
	// controller (same as naming it in Controllers).
	RemoveOutOfServiceTaint bool
	// Settings are each controller's own settings (its flags), by
	// controller name: Descriptor.Settings made them, with their defaults.
	Settings map[string]Settings
	// DryRun decides and logs but changes nothing.
	DryRun bool
	// Workers is the number of workers per controller.
	Workers int
	// Resync is the informers' resync period: the safety net behind the
	// event-driven reactions.
	Resync time.Duration

	// FeatureGate is --feature-gates; a controller whose Descriptor names
	// a gate runs only when it is enabled there (nil: such controllers
	// are off).
	FeatureGate featuregate.FeatureGate
}

// DefaultOptions returns the defaults of every flag.
func DefaultOptions() Options {
	return Options{
		Options:     runner.DefaultOptions(Component, "fenceline-system", 100, 500),
		Controllers: []string{"*"},
		Settings:    defaultSettings(Controllers),
		Workers:     4,
		Resync:      5 * time.Minute,
	}
}

// Validate checks the options. The binary calls it before it loads its
// kubeconfig, so that a bad value is a usage error even with no cluster.
func (o Options) Validate() error {
	var errs []error
	if _, err := EnabledControllers(o.Controllers, o.FeatureGate); err != nil {
		errs = append(errs, err)
	}
	for _, d := range Controllers {
		if s := o.Settings[d.Name]; s != nil {
			if err := s.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.Name, err))
			}
		}
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.Resync <= 0 {
		errs = append(errs, fmt.Errorf("--resync must be positive, got %v", o.Resync))
	}
	if err := o.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	own, err := controllerMetrics(Controllers, enabled, reg)
	if err != nil {
		return err
	}
	return runner.Run(ctx, opts.Config(base, Component, reg), func(ctx context.Context) error {
		return runControllers(ctx, base, processMetrics{shared: m, own: own}, opts, enabled)
	})
}

// processMetrics are the collectors of one process: those the controllers
// share, and each enabled controller's own, by name.
type processMetrics struct {
	shared *metrics.Metrics
	own    map[string]Metrics
}

// controllerMetrics creates and registers the own metrics of every enabled
// controller of table that has some.
func controllerMetrics(table []Descriptor, enabled map[string]bool, reg prometheus.Registerer) (map[string]Metrics, error) {
	out := map[string]Metrics{}
	for _, d := range table {
		if d.Metrics == nil || !enabled[d.Name] {
			continue
		}
		m := d.Metrics()
		if err := metrics.Register(reg, m.Collectors()...); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
		out[d.Name] = m
	}
	return out, nil
}
