// Package world runs the whole product on a local control plane: the mock
// CSI driver (controller service plus one node socket per KWOK node), a
// kubelet stand-in per node, and fenceline-attacher and fenceline-controller
// as real processes, each with the ServiceAccount and RBAC of its deploy
// manifest. End-to-end tests, benchmarks and the demo build on it.
package world

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/realkubelet"
)

// DriverName is the mock driver's CSI driver name.
const DriverName = "mock.fenceline.io"

// DriverOptions configure the mock driver process.
type DriverOptions struct {
	// NoFence makes the driver advertise no UNPUBLISH_FENCE (--fence=false).
	NoFence bool
	// NoForceUnpublish turns FORCE_UNPUBLISH off (--force-unpublish=false).
	NoForceUnpublish bool
	// StrictUnpublish starts the driver in strict unpublish mode
	// (--unpublish-mode=strict): a plain unpublish of a volume the node
	// still uses is refused. The default is real-array mode, where it
	// succeeds and the node keeps write access, as on most real arrays, so
	// that a plain unpublish where a fence was required shows up in the
	// data instead of being hidden by the driver. Only a scenario about a
	// driver that protects itself should opt in.
	StrictUnpublish bool
	// SafeDetach annotates the CSIDriver object with fenceline.io/safe-detach.
	SafeDetach bool
	// NoAttach serves a driver without an attach step: the mock runs with
	// --no-attach and the CSIDriver says attachRequired: false, so no
	// VolumeAttachment is ever made for its volumes.
	NoAttach bool
	// Args are extra flags for bin/mock-driver.
	Args []string
}

// Options select what runs.
type Options struct {
	// Nodes names the KWOK nodes (default node-a, node-b, node-c).
	Nodes []string
	// RealKubelets names nodes run by a real upstream kubelet on a fake
	// CRI (package realkubelet) beside the KWOK nodes: the kubelet
	// registers the Node, and the mock drivers' node sockets for it with
	// it. Needs root and `make node-tools`.
	RealKubelets []string
	// RealKubeletLeaseSeconds and RealKubeletStatusUpdate are the
	// real-kubelet nodes' lease duration in seconds and status update
	// period (the KWOK nodes' pace when zero).
	RealKubeletLeaseSeconds int
	RealKubeletStatusUpdate time.Duration
	// Driver configures the mock driver.
	Driver DriverOptions
	// SecondDriver, when set, runs a second mock driver, SecondDriverName,
	// beside the first, configured by it: a cluster with two storage
	// backends, each CSI driver with its own process, sockets, audit log,
	// CSIDriver object, StorageClass (SecondStorageClassName) and
	// fenceline-attacher (as many replicas as AttacherReplicas; in
	// Kubernetes every CSI driver has its own attacher sidecar). Every
	// node registers both drivers and its kubelet stand-in mounts the
	// volumes of either. Nil runs the one driver, as always.
	SecondDriver *DriverOptions
	// NoAttacher leaves fenceline-attacher out (nothing attaches volumes).
	NoAttacher bool
	// AttacherArgs are extra flags for fenceline-attacher.
	AttacherArgs []string
	// AttacherPath runs this binary instead of bin/fenceline-attacher, with
	// the same flags, identity and RBAC: the benchmarks use it to run the
	// upstream external-attacher as a drop-in baseline.
	AttacherPath string
	// AttacherReplicas runs that many fenceline-attacher replicas (as a
	// Deployment of two does), each with --leader-election on upstream's
	// Lease and short timings (AttacherLeaseDuration); 0 or 1 runs one
	// attacher without leader election. Each replica logs to
	// fenceline-attacher-<i>.log.
	AttacherReplicas int
	// NoController leaves fenceline-controller out (upstream behaviour).
	NoController bool
	// ControllerArgs are extra flags for fenceline-controller; they come
	// after the world's defaults, so they override them.
	ControllerArgs []string
	// ControllerReplicas runs that many fenceline-controller replicas (as
	// the 2-replica Deployment does), each with --leader-election and
	// short leader-election timings (ControllerLeaseDuration); 0 or 1 runs
	// one replica without leader election. Each replica logs to
	// fenceline-controller-<i>.log.
	ControllerReplicas int
	// APIProxy routes every Fenceline component (attachers, controllers,
	// the fence agent) to kube-apiserver through one delaying proxy,
	// World.APIProxy, that passes bytes at once until its delay is set: a
	// loaded or distant API server, as Fenceline's components see it.
	APIProxy bool
	// NetworkFence runs csi-addons network fencing: the NetworkFence CRDs,
	// a stand-in csi-addons controller (test/csiaddons), the mock driver's
	// csi-addons socket and NetworkFenceClass (NetworkFenceClassName), and
	// a distinct InternalIP per KWOK node (NodeIP), which the array sees
	// the node's writes come from.
	NetworkFence bool
	// NoNetworkFenceController, with NetworkFence, runs no stand-in
	// csi-addons controller: for the real one, pointed at the mock
	// driver's csi-addons socket (World.CSIAddonsSocket).
	NoNetworkFenceController bool
	// ZombieWrites keeps a powered-off node's writers writing.
	ZombieWrites bool
	// HeldOpen keeps a volume's writer going until its NodeUnpublishVolume
	// succeeds (kubelet.Config.HeldOpen): a process holds it open.
	HeldOpen bool
	// ForceCleanup makes the kubelet stand-ins send force=true on the
	// clean-up after a reboot; the upstream kubelet never does.
	ForceCleanup bool
	// WriteInterval is the kubelet stand-ins' write period.
	WriteInterval time.Duration
	// Fencing installs the fencing CRDs before fenceline-controller starts
	// (so that its node-fencing controller runs) and starts
	// fenceline-fence-agent; SetUpFencing then gives every node a BMC.
	Fencing bool
	// FenceAgentArgs are extra flags for fenceline-fence-agent.
	FenceAgentArgs []string
	// TaintEviction runs fenceline-controller's taint-eviction
	// (--feature-gates=TaintEviction=true) in place of kube-controller-
	// manager's taint-eviction-controller, which Start disables
	// (UpstreamTaintEvictionOff).
	TaintEviction bool
	// Cluster is passed on to cluster.Start; ControllerManager, Scheduler
	// and KWOK are always on.
	Cluster cluster.Options
	// Metrics serves every Fenceline component's metrics and health
	// checks on a loopback port of its own (--http-endpoint), listed by
	// World.MetricsEndpoints, for a scraper to reach as it reaches pods.
	Metrics bool
	// Installer, when set, installs the product as a user does (the Helm
	// chart) once the driver and the nodes are up, before any Fenceline
	// component starts: no deploy manifest RBAC is applied,
	// and fenceline-controller and fenceline-fence-agent run as their
	// installed Deployments say (RunDeployment), replicas included. Their
	// flags then come from the install (chart values), so ControllerArgs,
	// ControllerReplicas and FenceAgentArgs must be empty.
	Installer Installer
}

// UpstreamTaintEvictionOff is the kube-controller-manager flag that turns
// its own taint eviction off, for Fenceline's to replace it.
const UpstreamTaintEvictionOff = "--controllers=*,-taint-eviction-controller"

// TaintEvictionGate is the fenceline-controller flag that turns
// Fenceline's taint-eviction on.
const TaintEvictionGate = "--feature-gates=TaintEviction=true"

// World is the running product.
type World struct {
	// Cluster is the control plane.
	Cluster *cluster.Cluster
	// Nodes are the node names, in order.
	Nodes []string
	// Kubelets are the stand-ins by node name.
	Kubelets map[string]*kubelet.Kubelet
	// RealKubelets are the real-kubelet nodes by name
	// (Options.RealKubelets).
	RealKubelets map[string]*realkubelet.Node
	// Ledgers are the stand-ins' stamped block writes to volumes of the
	// tgt backend, shared by every node (a volume moves), for CheckBytes.
	Ledgers *iscsi.Book
	// ControllerSocket is the driver's controller endpoint (unix://...).
	ControllerSocket string
	// NodeSockets are the driver's node endpoints by node name.
	NodeSockets map[string]string
	// StateDir is the mock driver's state directory.
	StateDir string

	// Driver and Controller are the product's processes (nil when not
	// started). With Options.ControllerReplicas, Controller is the first
	// replica and Controllers holds them all.
	Driver, Controller *cluster.Process
	Controllers        []*cluster.Process
	// attacherGroup is the first driver's fenceline-attacher: Attacher,
	// and Attachers with Options.AttacherReplicas.
	attacherGroup
	// Second is the second mock driver with Options.SecondDriver, else nil.
	Second *MockDriver
	// FenceAgent is fenceline-fence-agent with Options.Fencing, else nil.
	FenceAgent *cluster.Process
	// APIProxy is the proxy between Fenceline's components and
	// kube-apiserver with Options.APIProxy, else nil.
	APIProxy *APIProxy

	standinLog     *os.File
	controllerArgs []string // the flags every controller replica runs with
	// fenceAgentArgs are the fence agent's flags; fenceAgentRestarts
	// counts KillFenceAgent's restarts.
	fenceAgentArgs     []string
	fenceAgentRestarts int
	// installed: an Installer put the RBAC in; none is applied from
	// deploy/.
	installed bool
	// realNames are Options.RealKubelets; writeInterval and zombieWrites
	// the nodes' workload options, for them.
	realNames     []string
	writeInterval time.Duration
	zombieWrites  bool
	heldOpen      bool
	realLease     int
	realStatus    time.Duration
	// metrics is Options.Metrics; endpoints what the components serve.
	metrics   bool
	endpoints endpoints
	// networkFence is Options.NetworkFence; stopNetworkFence stops its
	// stand-in controller. standinCtx carries the stand-ins' logger.
	networkFence     bool
	stopNetworkFence context.CancelFunc
	standinCtx       context.Context
}

// readyTimeout bounds the start of the product on a running control plane.
const readyTimeout = 90 * time.Second

// Start starts a control plane and the product on it for the test; every
// part stops when the test ends, and component logs land in
// test/output/<TestName> if it failed.
func Start(t testing.TB, opts Options) *World {
	t.Helper()
	copts := opts.Cluster
	copts.ControllerManager, copts.Scheduler, copts.KWOK = true, true, true
	if opts.TaintEviction {
		copts.ExtraControllerManagerArgs = append(slices.Clone(copts.ExtraControllerManagerArgs), UpstreamTaintEvictionOff)
	}
	c := cluster.Start(t, copts)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	w, err := Launch(ctx, c, opts)
	if w != nil {
		t.Cleanup(w.Stop)
	}
	if err != nil {
		t.Fatalf("starting the product: %v", err)
	}
	return w
}

// Launch starts the product on a running control plane. The caller must
// call Stop (then stop the cluster); on error the World, if not nil, holds
// what was started so far.
func Launch(ctx context.Context, c *cluster.Cluster, opts Options) (*World, error) {
	if len(opts.Nodes) == 0 {
		opts.Nodes = []string{"node-a", "node-b", "node-c"}
	}
	w := &World{
		Cluster:       c,
		Nodes:         opts.Nodes,
		Kubelets:      map[string]*kubelet.Kubelet{},
		RealKubelets:  map[string]*realkubelet.Node{},
		realNames:     opts.RealKubelets,
		writeInterval: opts.WriteInterval,
		zombieWrites:  opts.ZombieWrites,
		heldOpen:      opts.HeldOpen,
		realLease:     opts.RealKubeletLeaseSeconds,
		realStatus:    opts.RealKubeletStatusUpdate,
		metrics:       opts.Metrics,
		networkFence:  opts.NetworkFence,
		Ledgers:       &iscsi.Book{},
		NodeSockets:   map[string]string{},
		StateDir:      filepath.Join(c.Dir(), "mock"),
	}
	// The kubelet stand-ins run in this process; their log joins the
	// components' logs so that a failure collects it too.
	standinLog, err := os.OpenFile(filepath.Join(c.LogDir(), "kubelet-standins.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return w, fmt.Errorf("creating the stand-ins' log: %w", err)
	}
	w.standinLog = standinLog
	standinCtx := klog.NewContext(ctx, textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(standinLog), textlogger.Verbosity(4))))
	w.standinCtx = standinCtx
	if opts.NetworkFence {
		opts.Driver.Args = append(slices.Clone(opts.Driver.Args), w.networkFenceArgs()...)
	}
	if opts.APIProxy {
		if w.APIProxy, err = w.StartAPIProxy(); err != nil {
			return w, err
		}
	}
	if err := w.startDrivers(ctx, opts); err != nil {
		return w, err
	}
	for _, n := range w.Nodes {
		if err := c.AddNodeWithIP(ctx, n, w.nodeIP(n), w.DriverNames()...); err != nil {
			return w, err
		}
		k, err := kubelet.Start(standinCtx, kubelet.Config{
			NodeName:      n,
			Client:        c.Client(),
			Driver:        DriverName,
			Endpoint:      w.NodeSockets[n],
			OtherDrivers:  w.otherKubeletDrivers(n),
			DataDir:       filepath.Join(c.Dir(), "kubelet", n),
			WriteInterval: opts.WriteInterval,
			ZombieWrites:  opts.ZombieWrites,
			HeldOpen:      opts.HeldOpen,
			ForceCleanup:  opts.ForceCleanup,
			Ledgers:       w.Ledgers,
		})
		if err != nil {
			return w, err
		}
		w.Kubelets[n] = k
	}
	if err := w.startRealKubelets(ctx); err != nil {
		return w, err
	}
	if opts.NetworkFence {
		if err := w.startNetworkFence(ctx, !opts.NoNetworkFenceController); err != nil {
			return w, err
		}
	}
	// An install waits for its pods to be ready, so the nodes come first.
	if opts.Installer != nil {
		if err := checkInstallerOptions(opts); err != nil {
			return w, err
		}
		if err := opts.Installer.Install(ctx, c); err != nil {
			return w, fmt.Errorf("installing the product: %w", err)
		}
		w.installed = true
	}
	// The fencing API before the attachers, as an installation applies its
	// CRDs first: an attacher looks for the StorageFence API once, at start.
	if opts.Fencing {
		if _, err := w.InstallFencingCRDs(ctx); err != nil {
			return w, err
		}
	}
	if !opts.NoAttacher {
		binary := "fenceline-attacher"
		if opts.AttacherPath != "" {
			binary = opts.AttacherPath
		}
		for _, d := range w.DriverNames() {
			v, _ := w.driver(d)
			if err := w.startAttachers(ctx, v.attachers, binary, opts.AttacherReplicas, append([]string{
				"--csi-address=" + v.controllerSocket,
				// As in a Pod: the heartbeat Lease goes to the attacher's
				// own namespace, where its RBAC allows Leases.
				"--leader-election-namespace=" + Namespace,
				"--timeout=10s",
				"--retry-interval-start=500ms",
				"--retry-interval-max=5s",
				"--v=4",
			}, opts.AttacherArgs...)); err != nil {
				return w, err
			}
		}
	}
	if opts.Fencing {
		if err := w.startFenceAgent(ctx, opts.FenceAgentArgs); err != nil {
			return w, err
		}
	}
	if w.installed && !opts.NoController {
		return w, w.runInstalledController(ctx)
	}
	if !opts.NoController {
		args := append([]string{
			"--v=4",
			// Match this cluster's node-monitor grace period, as the flag
			// asks, instead of upstream's 50 s default.
			"--force-eviction-ready-grace=" + cluster.NodeMonitorGracePeriod.String(),
		}, opts.ControllerArgs...)
		if opts.TaintEviction {
			args = append([]string{TaintEvictionGate}, args...)
		}
		if opts.ControllerReplicas <= 1 {
			w.controllerArgs = args
			p, err := w.startComponent(ctx, "fenceline-controller", "controller", ControllerServiceAccount, args)
			if err != nil {
				return w, err
			}
			w.Controller, w.Controllers = p, []*cluster.Process{p}
		} else {
			args = append([]string{
				"--leader-election",
				"--leader-election-namespace=" + Namespace,
				"--leader-election-lease-duration=" + ControllerLeaseDuration.String(),
				"--leader-election-renew-deadline=" + (ControllerLeaseDuration * 3 / 4).String(),
				"--leader-election-retry-period=500ms",
			}, args...)
			w.controllerArgs = args
			for range opts.ControllerReplicas {
				if _, err := w.StartControllerReplica(ctx); err != nil {
					return w, err
				}
			}
			w.Controller = w.Controllers[0]
		}
	}
	return w, nil
}

// unpublishMode is the driver's unpublish mode: real-array unless the
// scenario opted into strict.
func (o DriverOptions) unpublishMode() array.UnpublishMode {
	if o.StrictUnpublish {
		return array.UnpublishStrict
	}
	return array.UnpublishRealArray
}

// WaitDriverReady waits until the CSI Identity service at ep, served by the
// driver process p, answers Probe ready; it fails at once if p exits.
func WaitDriverReady(ctx context.Context, p *cluster.Process, ep string) error {
	conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", ep, err)
	}
	defer conn.Close()
	id := csi.NewIdentityClient(conn)
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("mock driver exited (%v); see %s", err, p.LogPath)
		}
		resp, err := id.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		return resp.GetReady() == nil || resp.GetReady().GetValue(), nil
	})
}

func (w *World) createCSIDriver(ctx context.Context, name string, o DriverOptions) error {
	attach := !o.NoAttach
	d := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: &attach},
	}
	if o.SafeDetach {
		d.Annotations = map[string]string{names.SafeDetachAnnotation: "true"}
	}
	if _, err := w.Cluster.Client().StorageV1().CSIDrivers().Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating CSIDriver %s: %w", name, err)
	}
	return nil
}

// startComponent applies deploy/<component>/rbac.yaml, gets a token for the
// component's ServiceAccount and runs bin/<binary> with that identity.
// A binary given as an absolute path runs as is.
func (w *World) startComponent(ctx context.Context, binary, component, sa string, args []string) (*cluster.Process, error) {
	return w.startComponentAs(ctx, "", binary, component, sa, args)
}

// startComponentAs is startComponent with the process (and log file) named
// name instead of after the binary.
func (w *World) startComponentAs(ctx context.Context, name, binary, component, sa string, args []string) (*cluster.Process, error) {
	bin := binary
	if !filepath.IsAbs(binary) {
		var err error
		if bin, err = cluster.Binary(binary); err != nil {
			return nil, err
		}
	} else {
		binary = filepath.Base(binary)
	}
	if !w.installed {
		if err := applyComponentRBAC(ctx, w.Cluster.Client(), component); err != nil {
			return nil, err
		}
	}
	_, kubeconfig, err := w.Cluster.ServiceAccountKubeconfig(ctx, Namespace, sa)
	if err != nil {
		return nil, err
	}
	if w.APIProxy != nil {
		if err := w.APIProxy.PointKubeconfig(kubeconfig, w.Cluster.ServerURL()); err != nil {
			return nil, err
		}
	}
	if name == "" {
		name = binary
	}
	if args, err = w.withMetricsEndpoint(name, binary, args); err != nil {
		return nil, err
	}
	p, err := cluster.StartProcess(name, w.Cluster.LogDir(), bin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	if err != nil {
		return nil, err
	}
	w.Cluster.Track(p)
	return p, nil
}

// PowerOff cuts node's power: KWOK stops heartbeating it and its kubelet
// stand-in loses the API server (its writers go on with ZombieWrites).
func (w *World) PowerOff(ctx context.Context, node string) error {
	if n := w.RealKubelets[node]; n != nil {
		n.PowerOff()
		return nil
	}
	if k := w.Kubelets[node]; k != nil {
		k.PowerOff()
	}
	return w.Cluster.PowerOff(ctx, node)
}

// PowerOn boots node again with a new boot ID; its stand-in cleans up
// volumes whose pods left meanwhile.
func (w *World) PowerOn(ctx context.Context, node string) error {
	if n := w.RealKubelets[node]; n != nil {
		return n.PowerOn(ctx)
	}
	if err := w.Cluster.PowerOn(ctx, node); err != nil {
		return err
	}
	if k := w.Kubelets[node]; k != nil {
		return k.PowerOn()
	}
	return nil
}

// AuditPath returns the (first) mock driver's audit log.
func (w *World) AuditPath() string { return filepath.Join(w.StateDir, "audit.jsonl") }

// Audit reads the (first) mock driver's audit log; Audits reads every
// driver's.
func (w *World) Audit() ([]audit.Record, error) { return w.AuditOf(DriverName) }

// Stop stops the kubelet stand-ins; the processes stop with the cluster
// (they are tracked by it), newest first.
func (w *World) Stop() {
	if w.stopNetworkFence != nil {
		w.stopNetworkFence()
	}
	for _, k := range w.Kubelets {
		k.Stop()
	}
	for _, n := range w.RealKubelets {
		n.Stop()
	}
	procs := slices.Concat(w.Controllers, w.AttacherProcesses(), []*cluster.Process{w.Driver})
	if w.Second != nil {
		procs = append(procs, w.Second.Process)
	}
	for _, p := range procs {
		if p != nil {
			p.Stop(5 * time.Second)
		}
	}
	if w.standinLog != nil {
		_ = w.standinLog.Close()
	}
	if w.APIProxy != nil {
		w.APIProxy.Close()
	}
}
