// Package app runs fenceline-controller: it builds the shared informers,
// the enabled controllers, the event recorder, metrics and health endpoints
// and leader election. The binary in cmd/fenceline-controller only parses
// flags and calls Run; tests call Run in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/stdmetrics"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/attacherevidence"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/outofservice"
	"fenceline.io/fenceline/pkg/controller/podgc"
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
	// KubeAPIQPS and KubeAPIBurst limit the client. A node's worth of
	// force deletions costs three requests per pod (the node re-read for
	// the write-time re-check, status, delete), so the
	// burst is sized for a couple of full nodes at once; Events go through
	// a second client with the same limits, so they never delay a deletion.
	// The API server's priority and fairness still protects the server.
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

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if _, err := EnabledControllers(o.Controllers); err != nil {
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
	if o.LeaderElection && o.LeaderElectionNamespace == "" {
		errs = append(errs, errors.New("--leader-election-namespace must be set with --leader-election"))
	}
	return errors.Join(errs...)
}

type runner interface {
	Run(ctx context.Context, workers int)
}

// Run runs the enabled controllers until ctx is cancelled (nil error) or
// leadership is lost (error).
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	enabled, _ := EnabledControllers(opts.Controllers)
	if opts.RemoveOutOfServiceTaint {
		enabled[outofservice.Name] = true
	}
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), Component)
	cfg.QPS, cfg.Burst = opts.KubeAPIQPS, opts.KubeAPIBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client: %w", err)
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("registering runtime metrics: %w", err)
			}
		}
	}
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}

	// Deferred in this order so that cancel runs first and the HTTP
	// server has stopped when Run returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The watchdog fails /healthz when this replica leads but has not
	// renewed its lease for a while, so a wedged leader gets restarted.
	var watchdog *leaderelection.HealthzAdaptor
	if opts.LeaderElection {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(opts.RenewDeadline)
	}
	if opts.HTTPEndpoint != "" {
		srv, err := serveHTTP(ctx, opts, reg, watchdog, &wg)
		if err != nil {
			return err
		}
		logger.Info("Serving metrics and health", "address", srv)
	}

	// Not tied to ctx: syncs still running at shutdown may record Events;
	// the deferred Shutdown runs after every controller has stopped.
	broadcaster := record.NewBroadcaster()
	broadcaster.StartStructuredLogging(4)
	eventClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client for Events: %w", err)
	}
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: eventClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component})

	act := &actuator.Actuator{Client: client, Recorder: recorder, Metrics: m, DryRun: opts.DryRun}
	run := func(ctx context.Context) error {
		return runControllers(ctx, client, act, opts, enabled)
	}
	if !opts.LeaderElection {
		return run(ctx)
	}
	return runWithLeaderElection(ctx, client, opts, watchdog, run)
}

func runControllers(ctx context.Context, client kubernetes.Interface, act *actuator.Actuator, opts Options, enabled map[string]bool) error {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, informers.WithTransform(dropManagedFields))
	// Node Leases live in one namespace; watching only that one keeps the
	// cache (and the RBAC) to what force-eviction reads.
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync,
		informers.WithNamespace(v1.NamespaceNodeLease), informers.WithTransform(dropManagedFields))
	var (
		ctrls    []runner
		evidence *attacherevidence.Tracker
	)
	for _, name := range KnownControllers {
		if !enabled[name] {
			continue
		}
		var (
			c   runner
			err error
		)
		switch name {
		case podgc.Name:
			c, err = podgc.New(factory, act)
		case quarantine.Name:
			c, evidence, err = newQuarantine(client, factory, act, opts)
		case forceeviction.Name:
			c, err = forceeviction.New(factory, leaseFactory, act, opts.ForceEvictionReadyGrace)
		case outofservice.Name:
			c, err = outofservice.New(factory, act)
		}
		if err != nil {
			return fmt.Errorf("setting up controller %s: %w", name, err)
		}
		logger.Info("Controller enabled", "controller", name, "dryRun", opts.DryRun)
		ctrls = append(ctrls, c)
	}
	if len(ctrls) == 0 {
		return errors.New("no controller enabled")
	}
	for _, f := range []informers.SharedInformerFactory{factory, leaseFactory} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	for _, f := range []informers.SharedInformerFactory{factory, leaseFactory} {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("informer cache for %v did not sync", typ)
			}
		}
	}
	if evidence != nil {
		if err := startEvidence(ctx, evidence); err != nil || ctx.Err() != nil {
			return err
		}
	}
	logger.Info("Caches synced; controllers running")
	var wg sync.WaitGroup
	for _, c := range ctrls {
		wg.Go(func() { c.Run(ctx, opts.Workers) })
	}
	wg.Wait()
	return nil
}

// newQuarantine creates the quarantine controller and the attacher evidence
// it acts on: the heartbeat Leases of fenceline-attachers, without which it
// neither force-deletes nor releases anything.
func newQuarantine(client kubernetes.Interface, factory informers.SharedInformerFactory, act *actuator.Actuator, opts Options) (runner, *attacherevidence.Tracker, error) {
	evidence, err := attacherevidence.New(client, factory.Storage().V1().CSIDrivers(), opts.Resync)
	if err != nil {
		return nil, nil, err
	}
	c, err := quarantine.New(factory, act, opts.QuarantineDelay, opts.QuarantineLiftDelay, evidence)
	return c, evidence, err
}

// startEvidence starts the heartbeat Lease cache and waits for it to sync:
// quarantine must not report "no heartbeat" for one that is merely not
// cached yet. A sync cut short by ctx is no error.
func startEvidence(ctx context.Context, evidence *attacherevidence.Tracker) error {
	evidence.Start(ctx)
	if !evidence.WaitForCacheSync(ctx) && ctx.Err() == nil {
		return errors.New("heartbeat Lease cache did not sync")
	}
	return nil
}

// dropManagedFields trims what the caches keep: managed fields are large
// and never read.
func dropManagedFields(obj any) (any, error) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok && a.GetObjectMeta() != nil {
		a.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

var _ cache.TransformFunc = dropManagedFields

func runWithLeaderElection(ctx context.Context, client kubernetes.Interface, opts Options, watchdog *leaderelection.HealthzAdaptor, run func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	id := opts.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("getting host name for leader election identity: %w", err)
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// The controllers run only while this replica leads. When they stop
	// (error) the lease is given up too, and Run waits for them before
	// returning, so nothing keeps writing after Run returns.
	leCtx, leCancel := context.WithCancel(ctx)
	defer leCancel()
	var (
		runErr  error
		started = make(chan struct{})
		done    = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   opts.LeaseDuration,
		RenewDeadline:   opts.RenewDeadline,
		RetryPeriod:     opts.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            opts.LeaseName,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				close(started)
				defer close(done)
				logger.Info("Became leader", "identity", id)
				runErr = run(ctx)
				leCancel()
			},
			OnStoppedLeading: func() {
				logger.Info("Stopped leading", "identity", id)
			},
			OnNewLeader: func(identity string) {
				logger.Info("Leader elected", "leader", identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring leader election: %w", err)
	}
	le.Run(leCtx)
	select {
	case <-started:
		<-done
	default:
		return nil // never led; ctx ended while waiting
	}
	switch {
	case runErr != nil:
		return runErr
	case ctx.Err() == nil:
		return errors.New("leader election lost")
	}
	return nil
}

func serveHTTP(ctx context.Context, opts Options, reg *prometheus.Registry, watchdog *leaderelection.HealthzAdaptor, wg *sync.WaitGroup) (string, error) {
	mux := http.NewServeMux()
	mux.Handle(opts.MetricsPath, stdmetrics.Handler(reg))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if watchdog != nil {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	ln, err := net.Listen("tcp", opts.HTTPEndpoint)
	if err != nil {
		return "", fmt.Errorf("listening on --http-endpoint %s: %w", opts.HTTPEndpoint, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server failed")
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	})
	return ln.Addr().String(), nil
}
