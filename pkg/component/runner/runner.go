// Package runner is the outer shell of a Fenceline controller process:
// leader election (optional) around the component's work, while serving
// metrics and health checks. fenceline-controller and fenceline-fence-agent
// share it, so that both behave alike when they lead, lose the lease or
// stop (see pkg/component/leader for the lease rules).
package runner

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"fenceline.io/fenceline/pkg/component/httpserver"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/component/leader"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/pkg/version"
)

// Config says how one component process runs.
type Config struct {
	// Base is the component's client configuration; leader election gets
	// a client of its own from it, with user agent <Component>/leader-election.
	Base *rest.Config
	// Component names the process (user agents, default identity).
	Component string
	// LeaderElection enables leader election on the Lease LeaseName.
	LeaderElection bool
	Leader         leader.Options
	LeaseName      string
	// Identity is this replica's leader-election identity; default: host
	// name and a random suffix.
	Identity string
	// HTTPEndpoint (host:port) serves MetricsPath and the health checks;
	// empty serves nothing.
	HTTPEndpoint, MetricsPath string
	// Metrics is what MetricsPath serves.
	Metrics prometheus.Gatherer
}

// Run runs work, under leader election when enabled, while serving HTTP,
// until ctx ends (nil) or the work fails or the lease is lost (error).
func Run(ctx context.Context, cfg Config, work func(context.Context) error) error {
	var elector *leader.Elector
	if cfg.LeaderElection {
		var err error
		if elector, err = newElector(cfg); err != nil {
			return err
		}
	}
	if cfg.HTTPEndpoint != "" {
		srv, err := httpserver.Start(ctx, httpserver.Config{Address: cfg.HTTPEndpoint, MetricsPath: cfg.MetricsPath, Metrics: cfg.Metrics, Health: elector.Check})
		if err != nil {
			return err
		}
		defer srv.Stop()
	}
	return elector.Run(ctx, work)
}

// Registry returns reg, or a new registry with the Go runtime and process
// collectors when reg is nil.
func Registry(reg *prometheus.Registry) (*prometheus.Registry, error) {
	if reg != nil {
		return reg, nil
	}
	reg = prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering runtime metrics: %w", err)
		}
	}
	return reg, nil
}

// newElector prepares leader election on the Lease cfg.LeaseName, with a
// client of its own so that a busy component cannot starve renewals.
func newElector(cfg Config) (*leader.Elector, error) {
	id := cfg.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("getting host name for leader election identity: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	client, err := kubernetes.NewForConfig(kubeclient.WithUserAgent(cfg.Base, cfg.Component+"/leader-election"))
	if err != nil {
		return nil, fmt.Errorf("creating leader election client: %w", err)
	}
	return leader.New(leader.Config{
		Options:      cfg.Leader,
		Name:         cfg.LeaseName,
		Identity:     id,
		Core:         client.CoreV1(),
		Coordination: client.CoordinationV1(),
		Annotations:  map[string]string{names.LeaderVersionAnnotation: version.Version},
	})
}
