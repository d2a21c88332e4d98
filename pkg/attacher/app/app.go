// Package app assembles the fenceline-attacher: CSI connection and
// capability discovery, Kubernetes clients and informers, Events, metrics,
// the HTTP endpoint and leader election. The binary calls Run; tests and
// benchmarks can run the same attacher in-process.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/controller"
	"fenceline.io/fenceline/pkg/attacher/csiclient"
	"fenceline.io/fenceline/pkg/attacher/heartbeat"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/component/events"
	"fenceline.io/fenceline/pkg/component/httpserver"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/component/leader"
	"fenceline.io/fenceline/pkg/names"
)

// LeaderElectionHealthPath is where the leader-election health check is
// served on --http-endpoint, the same path as upstream sidecars (it is
// also served on /healthz).
const LeaderElectionHealthPath = httpserver.LeaderElectionHealthPath

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
	// DetachWorkerThreads and FailoverWorkerThreads are Fenceline's
	// --detach-worker-threads and --failover-worker-threads: the workers of
	// the detach and failover queues; 0 means WorkerThreads.
	DetachWorkerThreads, FailoverWorkerThreads int
	// FailoverKubeAPIQPS and FailoverKubeAPIBurst are Fenceline's
	// --failover-kube-api-qps and --failover-kube-api-burst: the budget of
	// the client failover work writes through; 0 means KubeAPIQPS and
	// KubeAPIBurst.
	FailoverKubeAPIQPS   float64
	FailoverKubeAPIBurst int
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
	// StorageFenceInterval is --storage-fence-interval, Fenceline's own:
	// how often the driver's fences (ListFences) are read and published
	// as StorageFences; 0 publishes none.
	StorageFenceInterval time.Duration
	// AttachEvents is --attach-events, Fenceline's own flag: record a
	// Normal Attached Event for every attach and a Normal Detached Event
	// for every plain detach (off, as upstream).
	AttachEvents bool
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
		StorageFenceInterval:        time.Minute,
	}
}

// Validate checks what upstream also rejects: both metrics endpoints, no
// workers, and leader-election timings its elector refuses. Values
// upstream accepts are accepted (see Warnings).
func (o Options) Validate() error {
	var errs []error
	if o.HTTPEndpoint != "" && o.MetricsAddress != "" {
		errs = append(errs, errors.New("only one of --metrics-address and --http-endpoint can be set"))
	}
	if o.WorkerThreads <= 0 {
		errs = append(errs, fmt.Errorf("--worker-threads must be greater than zero, got %d", o.WorkerThreads))
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"--detach-worker-threads", float64(o.DetachWorkerThreads)},
		{"--failover-worker-threads", float64(o.FailoverWorkerThreads)},
		{"--failover-kube-api-qps", o.FailoverKubeAPIQPS},
		{"--failover-kube-api-burst", float64(o.FailoverKubeAPIBurst)},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must be 0 (the value of the flag without failover- or detach-) or more, got %v", f.name, f.v))
		}
	}
	if o.StorageFenceInterval < 0 {
		errs = append(errs, fmt.Errorf("--storage-fence-interval must be 0 (publish no storage fences) or more, got %v", o.StorageFenceInterval))
	}
	if err := o.leaderOptions().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Warnings lists values upstream accepts and this attacher therefore
// accepts too, though they are unwise: a manifest written for upstream
// must start unchanged after the image swap, and says what it gets.
func (o Options) Warnings() []string {
	var w []string
	if o.Timeout <= 0 {
		w = append(w, fmt.Sprintf("--timeout=%v: every CSI call times out at once, so no volume attaches or detaches", o.Timeout))
	}
	if o.RetryIntervalStart <= 0 {
		w = append(w, fmt.Sprintf("--retry-interval-start=%v: failed attaches and detaches are retried without delay", o.RetryIntervalStart))
	}
	if o.RetryIntervalMax < o.RetryIntervalStart {
		w = append(w, fmt.Sprintf("--retry-interval-max=%v is below --retry-interval-start=%v: every retry waits --retry-interval-max", o.RetryIntervalMax, o.RetryIntervalStart))
	}
	if o.MaxEntries < 0 {
		w = append(w, fmt.Sprintf("--max-entries=%d is sent to the driver's ListVolumes as is; most drivers refuse a negative value", o.MaxEntries))
	}
	return w
}

// Run runs the attacher until ctx is cancelled (nil error) or something
// fatal happens, such as losing the leader lease. With leader election the
// attacher works only while it leads, and gives the lease up when its work
// stops for any reason (see pkg/component/leader).
func Run(ctx context.Context, opts Options) error {
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
	d, err := connectDriver(ctx, opts, cmm)
	if err != nil {
		return err
	}
	defer func() { _ = d.conn.Close() }()
	logger := klog.FromContext(ctx).WithValues("driver", d.name)
	ctx = klog.NewContext(ctx, logger)

	blind, err := checkAccess(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal before the API server answered is a clean stop
		}
		return err
	}
	var fences *storageFences
	ctrl, factory, stopEvents, err := newController(ctx, opts, config, client, d, blind, cmm.GetRegistry(), func() { fences.fencedDetach() })
	if err != nil {
		return err
	}
	defer stopEvents()
	if fences, err = newStorageFences(ctx, opts, config, client, d, blind, factory, cmm.GetRegistry()); err != nil {
		return err
	}
	defer fences.close()
	hb, err := heartbeatConfig(opts, config, d.name, d.caps.Fence.UnpublishFence && !blind, cmm.GetRegistry())
	if err != nil {
		return err
	}
	// run runs only while this replica leads, and the heartbeat only while
	// the controller runs.
	run := func(ctx context.Context) error {
		if kubeclient.WaitForAPIServer(ctx, client.Discovery().RESTClient(), kubeclient.DefaultAPIWait) != nil {
			return nil // only the end of ctx (a signal, a lost lease) stops the wait
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		defer heartbeat.Start(ctx, hb)()
		defer fences.start(ctx)()
		return ctrl.Run(ctx, opts.WorkerThreads)
	}
	return runServing(ctx, opts, config, d.name, cmm.GetRegistry(), run)
}

// newController wires the attacher's controller and its informers. Events
// and fence records get clients of their own; stopEvents flushes the
// Events once the controller has stopped.
func newController(ctx context.Context, opts Options, config *rest.Config, client kubernetes.Interface, d *driver, blind bool, registry k8smetrics.KubeRegistry, afterFencedDetach func()) (
	ctrl *controller.Controller, factory informers.SharedInformerFactory, stopEvents func(), err error) {
	// Events get their own client, and so their own rate limiter: upstream
	// emits no Events, and sharing --kube-api-qps with them would slow every
	// attach and detach below upstream's throughput.
	eventClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create Kubernetes client for Events: %w", err)
	}
	// Fence records get a client of their own too: at most one write per
	// fenced detach, which must not wait behind a failover's attaches on
	// --kube-api-qps (see docs/attacher.md, "Cost of the record").
	recordClient, err := kubernetes.NewForConfig(recordConfig(config))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create Kubernetes client for fence records: %w", err)
	}
	// Failover work has a budget of its own, the attacher's by default: a
	// storm of routine attaches and detaches on --kube-api-qps must not
	// delay the volumes of a lost node.
	failoverClient, err := kubernetes.NewForConfig(failoverConfig(config, opts))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create Kubernetes client for failover work: %w", err)
	}
	// The fresh reads that confirm a plain detach (one per detach, shared
	// per node) have a budget of their own, the size of the attacher's:
	// upstream makes no such read, and on --kube-api-qps they would halve
	// the detach rate. A detach then costs as many requests as upstream's
	// (a read and a write against two writes), at its own write budget.
	readClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create Kubernetes client for confirming reads: %w", err)
	}
	recorder, stopEvents := events.NewRecorder(ctx, eventClient, userAgent)
	factory = informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, informers.WithTransform(trimForCache))
	ctrl, err = controller.New(controller.Config{
		DriverName:         d.name,
		Client:             client,
		RecordClient:       recordClient,
		FailoverClient:     failoverClient,
		ReadClient:         readClient,
		DetachWorkers:      opts.DetachWorkerThreads,
		FailoverWorkers:    opts.FailoverWorkerThreads,
		CSI:                d.csi,
		Capabilities:       d.caps,
		Timeout:            opts.Timeout,
		RetryIntervalStart: opts.RetryIntervalStart,
		RetryIntervalMax:   opts.RetryIntervalMax,
		DefaultFSType:      opts.DefaultFSType,
		ReconcileSync:      opts.ReconcileSync,
		MaxEntries:         int32(min(opts.MaxEntries, 1<<31-1)),
		Recorder:           recorder,
		AttachEvents:       opts.AttachEvents,
		Metrics:            metrics.New(registry),
		Blind:              blind,
		AfterFencedDetach:  afterFencedDetach,
	}, factory)
	if err != nil {
		stopEvents()
		return nil, nil, nil, fmt.Errorf("create controller: %w", err)
	}
	metrics.RegisterState(registry, ctrl)
	return ctrl, factory, stopEvents, nil
}

// runServing runs run, under leader election if enabled, while serving
// metrics and health checks.
func runServing(ctx context.Context, opts Options, config *rest.Config, driverName string, registry prometheus.Gatherer, run func(context.Context) error) error {
	var elector *leader.Elector
	if opts.LeaderElection {
		var (
			stopEvents func()
			err        error
		)
		if elector, stopEvents, err = newElector(ctx, opts, config, driverName); err != nil {
			return err
		}
		defer stopEvents()
	}
	addr := opts.HTTPEndpoint
	if addr == "" {
		addr = opts.MetricsAddress
	}
	if addr != "" {
		srv, err := httpserver.Start(ctx, httpserver.Config{Address: addr, MetricsPath: opts.MetricsPath, Metrics: registry, Health: elector.Check})
		if err != nil {
			return err
		}
		defer srv.Stop()
	}
	return elector.Run(ctx, run)
}

// driver is the connected CSI driver.
type driver struct {
	conn *grpc.ClientConn
	csi  *csiclient.Client
	name string
	caps csiclient.Capabilities
}

// connectDriver connects to the CSI driver, waits until it is ready and
// discovers its name and capabilities.
func connectDriver(ctx context.Context, opts Options, cmm csimetrics.CSIMetricsManager) (*driver, error) {
	connOpts := []connection.Option{}
	if opts.ExitOnConnectionLoss {
		connOpts = append(connOpts, connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	}
	conn, err := connection.Connect(ctx, opts.CSIAddress, cmm, connOpts...)
	if err != nil {
		return nil, fmt.Errorf("connect to CSI driver at %s: %w", opts.CSIAddress, err)
	}
	d := &driver{conn: conn, csi: csiclient.New(conn)}
	if err := d.discover(ctx, opts.Timeout); err != nil {
		_ = conn.Close()
		return nil, err
	}
	cmm.SetDriverName(d.name)
	klog.FromContext(ctx).Info("CSI driver discovered", "driver", d.name, "controllerService", d.caps.ControllerService, "publishUnpublish", d.caps.PublishUnpublish,
		"listVolumesPublishedNodes", d.caps.ListVolumesPublishedNodes, "unpublishFence", d.caps.Fence.UnpublishFence)
	return d, nil
}

func (d *driver) discover(ctx context.Context, timeout time.Duration) error {
	if err := rpc.ProbeForever(ctx, d.conn, timeout); err != nil {
		return fmt.Errorf("probe CSI driver: %w", err)
	}
	var err error
	if d.name, err = callWithTimeout(ctx, timeout, d.csi.DriverName); err != nil {
		return err
	}
	d.caps, err = callWithTimeout(ctx, timeout, d.csi.Discover)
	return err
}

// A fence record's client has at least this budget. Records are bounded
// by the volumes of cut-off nodes and all come at once, when a node is
// lost: at --kube-api-qps 5 a node of 100 volumes waited 18 s for its last
// record, and so for its last fenced unpublish. 200 covers a full node (110
// pods) of single-volume pods in one burst; the API server's priority and
// fairness still bounds the rate it accepts.
const (
	fenceRecordQPS   = 50
	fenceRecordBurst = 200
)

// recordConfig is config with the fence records' budget: the attacher's
// own when it is larger.
func recordConfig(config *rest.Config) *rest.Config {
	c := rest.CopyConfig(config)
	c.QPS = max(c.QPS, fenceRecordQPS)
	c.Burst = max(c.Burst, fenceRecordBurst)
	return c
}

// failoverConfig is config with failover work's budget.
func failoverConfig(config *rest.Config, opts Options) *rest.Config {
	c := rest.CopyConfig(config)
	if opts.FailoverKubeAPIQPS > 0 {
		c.QPS = float32(opts.FailoverKubeAPIQPS)
	}
	if opts.FailoverKubeAPIBurst > 0 {
		c.Burst = opts.FailoverKubeAPIBurst
	}
	return c
}

// userAgent is the attacher's one user agent: every request it makes,
// Events and Leases included, is attributed to it.
const userAgent = "fenceline-attacher"

func restConfig(opts Options) (*rest.Config, error) {
	return kubeclient.Config(kubeclient.Options{
		Kubeconfig: opts.Kubeconfig,
		Base:       opts.RestConfig,
		QPS:        float32(opts.KubeAPIQPS),
		Burst:      opts.KubeAPIBurst,
		UserAgent:  userAgent,
	})
}

func callWithTimeout[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(ctx)
}

// leaderOptions are the --leader-election* flags.
func (o Options) leaderOptions() leader.Options {
	return leader.Options{
		Enabled:       o.LeaderElection,
		Namespace:     o.LeaderElectionNamespace,
		LeaseDuration: o.LeaderElectionLeaseDuration,
		RenewDeadline: o.LeaderElectionRenewDeadline,
		RetryPeriod:   o.LeaderElectionRetryPeriod,
	}
}

// newElector prepares leader election on the Lease that the upstream
// external-attacher uses, so that the two never lead at the same time.
// Like upstream's, it records a LeaderElection Event on the Lease when this
// replica becomes leader, with the same source as upstream's;
// stopEvents flushes and stops those Events.
func newElector(ctx context.Context, opts Options, config *rest.Config, driverName string) (_ *leader.Elector, stopEvents func(), _ error) {
	// A separate client so that a busy, throttled attacher client cannot
	// starve lease renewals.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, fmt.Errorf("create leader election client: %w", err)
	}
	namespace, identity := electionNamespaceAndIdentity(opts)
	lo := opts.leaderOptions()
	lo.Namespace = namespace
	// The source is upstream's: the lock name and identity as given,
	// before they are sanitized into the Lease's name and holder.
	recorder, stopEvents := events.NewRecorder(ctx, leClient, "external-attacher-leader-"+driverName+"/"+identity)
	elector, err := leader.New(leader.Config{
		Options:      lo,
		Name:         names.AttacherLeaseName(driverName),
		Identity:     names.SanitizeDriverName(identity),
		Labels:       opts.LeaderElectionLabels,
		Core:         leClient.CoreV1(),
		Coordination: leClient.CoordinationV1(),
		Events:       recorder,
	})
	if err != nil {
		stopEvents()
		return nil, nil, err
	}
	return elector, stopEvents, nil
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

// replicaID tells apart two replicas of this process that share a host
// name; it is fixed for the life of the process.
var replicaID = string(uuid.NewUUID())

// electionNamespaceAndIdentity returns the namespace of the leader election
// Lease (and of the heartbeat Lease), and this replica's identity: the pod's
// namespace, as upstream, and the host name followed by a per-process ID.
// Upstream's identity is the host name alone, so two replicas that share it
// (hostNetwork pods on one node) would both take themselves for the leader
// and both attach and detach; kube-controller-manager adds a UUID for the
// same reason.
func electionNamespaceAndIdentity(opts Options) (namespace, identity string) {
	namespace = opts.LeaderElectionNamespace
	if namespace == "" {
		namespace = inClusterNamespace()
	}
	identity = opts.LeaderElectionIdentity
	if identity == "" {
		identity = events.Hostname(userAgent) + "_" + replicaID
	}
	return namespace, identity
}
