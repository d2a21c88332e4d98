// Package app assembles the fenceline-attacher: CSI connection and
// capability discovery, Kubernetes clients and informers, Events, metrics,
// the HTTP endpoint and leader election. The binary calls Run; tests and
// benchmarks can run the same attacher in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/controller"
	"fenceline.io/fenceline/pkg/attacher/csiclient"
	"fenceline.io/fenceline/pkg/attacher/heartbeat"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/component/stdmetrics"
	"fenceline.io/fenceline/pkg/names"
)

// LeaderElectionHealthPath is where the leader-election health check is
// served on --http-endpoint, the same path as upstream sidecars.
const LeaderElectionHealthPath = "/healthz/leader-election"

// Options are the attacher's settings; each field mirrors an upstream
// external-attacher flag of the same meaning.
type Options struct {
	// Kubeconfig is --kubeconfig; empty means in-cluster configuration.
	Kubeconfig string
	// RestConfig, when set, is used instead of Kubeconfig (in-process use).
	RestConfig *rest.Config
	// CSIAddress is --csi-address.
	CSIAddress string
	// Resync is --resync, the informers' resync period.
	Resync time.Duration
	// Timeout is --timeout for every CSI call.
	Timeout time.Duration
	// RetryIntervalStart and RetryIntervalMax are --retry-interval-start and
	// --retry-interval-max.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// WorkerThreads is --worker-threads.
	WorkerThreads int
	// MaxEntries is --max-entries for ListVolumes.
	MaxEntries int
	// DefaultFSType is --default-fstype.
	DefaultFSType string
	// ReconcileSync is --reconcile-sync.
	ReconcileSync time.Duration
	// MaxGRPCLogLength is --max-grpc-log-length.
	MaxGRPCLogLength int
	// LeaderElection and the fields after it are the --leader-election*
	// flags.
	LeaderElection              bool
	LeaderElectionNamespace     string
	LeaderElectionLeaseDuration time.Duration
	LeaderElectionRenewDeadline time.Duration
	LeaderElectionRetryPeriod   time.Duration
	LeaderElectionLabels        map[string]string
	// LeaderElectionIdentity defaults to the host name.
	LeaderElectionIdentity string
	// KubeAPIQPS and KubeAPIBurst are --kube-api-qps and --kube-api-burst.
	KubeAPIQPS   float64
	KubeAPIBurst int
	// HTTPEndpoint is --http-endpoint (metrics and leader-election health).
	HTTPEndpoint string
	// MetricsAddress is the deprecated --metrics-address.
	MetricsAddress string
	// MetricsPath is --metrics-path.
	MetricsPath string
	// HeartbeatInterval and HeartbeatDuration time the heartbeat Lease
	// (pkg/attacher/heartbeat). They are not flags, so the command line
	// stays upstream's; zero means the leader lease duration, renewed
	// three times within it.
	HeartbeatInterval, HeartbeatDuration time.Duration
	// ExitOnConnectionLoss makes the process exit when the CSI socket
	// connection is lost, as upstream does; in-process users leave it off
	// and the connection is re-established.
	ExitOnConnectionLoss bool
}

// DefaultOptions returns upstream's defaults.
func DefaultOptions() Options {
	return Options{
		CSIAddress:                  "/run/csi/socket",
		Resync:                      10 * time.Minute,
		Timeout:                     15 * time.Second,
		RetryIntervalStart:          time.Second,
		RetryIntervalMax:            5 * time.Minute,
		WorkerThreads:               10,
		ReconcileSync:               time.Minute,
		MaxGRPCLogLength:            -1,
		LeaderElectionLeaseDuration: 15 * time.Second,
		LeaderElectionRenewDeadline: 10 * time.Second,
		LeaderElectionRetryPeriod:   5 * time.Second,
		KubeAPIQPS:                  5,
		KubeAPIBurst:                10,
		MetricsPath:                 "/metrics",
	}
}

// Validate checks option combinations that upstream also rejects.
func (o Options) Validate() error {
	var errs []error
	if o.HTTPEndpoint != "" && o.MetricsAddress != "" {
		errs = append(errs, errors.New("only one of --metrics-address and --http-endpoint can be set"))
	}
	if o.WorkerThreads <= 0 {
		errs = append(errs, fmt.Errorf("--worker-threads must be positive, got %d", o.WorkerThreads))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %v", o.Timeout))
	}
	if o.RetryIntervalStart <= 0 || o.RetryIntervalMax < o.RetryIntervalStart {
		errs = append(errs, fmt.Errorf("--retry-interval-start (%v) must be positive and not above --retry-interval-max (%v)", o.RetryIntervalStart, o.RetryIntervalMax))
	}
	if o.MaxEntries < 0 {
		errs = append(errs, fmt.Errorf("--max-entries must not be negative, got %d", o.MaxEntries))
	}
	return errors.Join(errs...)
}

// Run runs the attacher until ctx is cancelled (nil error) or something
// fatal happens, such as losing the leader lease.
func Run(ctx context.Context, opts Options) error {
	logger := klog.FromContext(ctx)
	if err := opts.Validate(); err != nil {
		return err
	}
	connection.SetMaxGRPCLogLength(opts.MaxGRPCLogLength)

	config, err := restConfig(opts)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}

	cmm := csimetrics.NewCSIMetricsManagerForSidecar("")
	connOpts := []connection.Option{}
	if opts.ExitOnConnectionLoss {
		connOpts = append(connOpts, connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	}
	conn, err := connection.Connect(ctx, opts.CSIAddress, cmm, connOpts...)
	if err != nil {
		return fmt.Errorf("connect to CSI driver at %s: %w", opts.CSIAddress, err)
	}
	defer func() { _ = conn.Close() }()
	if err := rpc.ProbeForever(ctx, conn, opts.Timeout); err != nil {
		return fmt.Errorf("probe CSI driver: %w", err)
	}
	csi := csiclient.New(conn)
	driverName, err := callWithTimeout(ctx, opts.Timeout, csi.DriverName)
	if err != nil {
		return err
	}
	cmm.SetDriverName(driverName)
	caps, err := callWithTimeout(ctx, opts.Timeout, csi.Discover)
	if err != nil {
		return err
	}
	logger = logger.WithValues("driver", driverName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("CSI driver discovered", "controllerService", caps.ControllerService, "publishUnpublish", caps.PublishUnpublish,
		"listVolumesPublishedNodes", caps.ListVolumesPublishedNodes, "unpublishFence", caps.Fence.UnpublishFence)

	mux := http.NewServeMux()
	addr := opts.HTTPEndpoint
	if addr == "" {
		addr = opts.MetricsAddress
	}
	if addr != "" {
		mux.Handle(opts.MetricsPath, stdmetrics.Handler(cmm.GetRegistry()))
	}

	// Events get their own client, and so their own rate limiter: upstream
	// emits no Events, and sharing --kube-api-qps with them would slow every
	// attach and detach below upstream's throughput. The broadcaster drops
	// Events under pressure, so they never hold up a VolumeAttachment.
	eventClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("create Kubernetes client for Events: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: eventClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "fenceline-attacher", Host: hostname()})

	// Fence records get a client of their own too: at most one write per
	// fenced detach, which must not wait behind a failover's attaches on
	// --kube-api-qps (see docs/attacher.md, "Cost of the record").
	recordClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("create Kubernetes client for fence records: %w", err)
	}

	factory := informers.NewSharedInformerFactory(client, opts.Resync)
	ctrl, err := controller.New(controller.Config{
		DriverName:         driverName,
		Client:             client,
		RecordClient:       recordClient,
		CSI:                csi,
		Capabilities:       caps,
		Timeout:            opts.Timeout,
		RetryIntervalStart: opts.RetryIntervalStart,
		RetryIntervalMax:   opts.RetryIntervalMax,
		DefaultFSType:      opts.DefaultFSType,
		ReconcileSync:      opts.ReconcileSync,
		MaxEntries:         int32(min(opts.MaxEntries, 1<<31-1)),
		Recorder:           recorder,
		Metrics:            metrics.New(cmm.GetRegistry()),
	}, factory)
	if err != nil {
		return fmt.Errorf("create controller: %w", err)
	}
	metrics.RegisterState(cmm.GetRegistry(), ctrl)
	hb, err := heartbeatConfig(opts, config, driverName, caps, cmm.GetRegistry())
	if err != nil {
		return err
	}
	// run runs only while this replica leads, and the heartbeat only while
	// the controller runs.
	run := func(ctx context.Context) error {
		if waitForAPIServer(ctx, client.Discovery().RESTClient(), defaultAPIWait) != nil {
			return nil // only the end of ctx (a signal, a lost lease) stops the wait
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		defer heartbeat.Start(ctx, hb)()
		return ctrl.Run(ctx, opts.WorkerThreads)
	}

	var elector *leaderelection.LeaderElector
	if opts.LeaderElection {
		elector, err = newElector(ctx, opts, config, driverName, mux, run)
		if err != nil {
			return err
		}
	}
	if addr != "" {
		stop, err := serveHTTP(ctx, addr, mux)
		if err != nil {
			return err
		}
		defer stop()
	}
	if elector == nil {
		return run(ctx)
	}
	elector.Run(ctx)
	if ctx.Err() == nil {
		return errors.New("lost leader election lease")
	}
	return nil
}

func restConfig(opts Options) (*rest.Config, error) {
	var config *rest.Config
	if opts.RestConfig != nil {
		config = rest.CopyConfig(opts.RestConfig)
	} else {
		c, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load Kubernetes client configuration: %w", err)
		}
		config = c
	}
	config.QPS = float32(opts.KubeAPIQPS)
	config.Burst = opts.KubeAPIBurst
	config.UserAgent = "fenceline-attacher"
	// Protobuf, as upstream's sidecar: smaller and cheaper to decode than
	// JSON for the VolumeAttachments, PVs and Nodes it watches. Every type
	// the attacher reads is built in, so the API server always speaks it.
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return config, nil
}

func callWithTimeout[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}

// newElector prepares leader election on the Lease that the upstream
// external-attacher uses, so that the two never lead at the same time.
func newElector(ctx context.Context, opts Options, config *rest.Config, driverName string, mux *http.ServeMux, run func(context.Context) error) (*leaderelection.LeaderElector, error) {
	// A separate client so that a busy, throttled attacher client cannot
	// starve lease renewals.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("create leader election client: %w", err)
	}
	namespace, identity := electionNamespaceAndIdentity(opts)
	lock, err := resourcelock.NewWithLabels(resourcelock.LeasesResourceLock, namespace, names.AttacherLeaseName(driverName),
		leClient.CoreV1(), leClient.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: names.SanitizeDriverName(identity)}, opts.LeaderElectionLabels)
	if err != nil {
		return nil, fmt.Errorf("create leader election lock: %w", err)
	}
	health := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	mux.HandleFunc(LeaderElectionHealthPath, func(w http.ResponseWriter, r *http.Request) {
		if err := health.Check(r); err != nil {
			http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprint(w, "ok")
	})
	logger := klog.FromContext(ctx)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   opts.LeaderElectionLeaseDuration,
		RenewDeadline:   opts.LeaderElectionRenewDeadline,
		RetryPeriod:     opts.LeaderElectionRetryPeriod,
		ReleaseOnCancel: true,
		Name:            names.AttacherLeaseName(driverName),
		WatchDog:        health,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Became leader", "lease", namespace+"/"+names.AttacherLeaseName(driverName))
				if err := run(ctx); err != nil {
					logger.Error(err, "Attacher stopped")
				}
			},
			OnStoppedLeading: func() { logger.Info("Stopped leading") },
			OnNewLeader: func(id string) {
				logger.V(3).Info("New leader", "identity", id)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("configure leader election: %w", err)
	}
	return elector, nil
}

// serveHTTP serves mux on addr until stop is called.
func serveHTTP(ctx context.Context, addr string, mux *http.ServeMux) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on HTTP endpoint %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server failed", "address", addr)
		}
	}()
	klog.FromContext(ctx).Info("Serving metrics and health checks", "address", l.Addr().String())
	return func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-done
	}, nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "fenceline-attacher"
	}
	return h
}

// inClusterNamespace is the pod's namespace, as upstream determines it.
func inClusterNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "default"
}

// electionNamespaceAndIdentity returns the namespace of the leader election
// Lease (and of the heartbeat Lease), and this replica's identity, with
// upstream's defaults: the pod's namespace and the host name.
func electionNamespaceAndIdentity(opts Options) (namespace, identity string) {
	namespace = opts.LeaderElectionNamespace
	if namespace == "" {
		namespace = inClusterNamespace()
	}
	identity = opts.LeaderElectionIdentity
	if identity == "" {
		identity = hostname()
	}
	return namespace, identity
}
