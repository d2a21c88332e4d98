// Package realkubelet runs a real upstream kubelet as a node of the local
// test cluster, beside the KWOK nodes and their kubelet stand-ins: the
// kubelet built from the pinned Kubernetes module (make node-tools), a fake
// CRI in place of a container runtime (nothing runs, nothing is mounted),
// and the mock driver's node socket registered with the kubelet as the
// node-driver-registrar would. The kubelet then creates the Node and its
// CSINode, stages and publishes the CSI volumes of its pods after their
// attach, reports volumesInUse, and cleans up as upstream does.
//
// It needs root (the kubelet manages its root directory's mounts) and the
// tools; the kubelet is told to leave the host's cgroups, swap and disk
// alone (no QoS cgroups, no node allocatable enforcement, cgroupfs, swap
// allowed, no eviction). Without them Require skips, or fails with
// RequireEnv set.
package realkubelet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/kubelet"
)

// RequireEnv is the environment variable CI sets: with it, a machine that
// cannot run a real kubelet fails the tests that need one.
const RequireEnv = "FENCELINE_REQUIRE_REAL_KUBELET"

// Tools are the binaries a real-kubelet node needs, from `make node-tools`.
var Tools = []string{"kubelet", "fake-cri"}

// Require skips t unless a real kubelet can run here, and fails it instead
// when RequireEnv is set.
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%v, and %s is set", err, RequireEnv)
		}
		t.Skipf("%v (CI runs real-kubelet nodes and requires them)", err)
	}
}

// Available says why a real kubelet cannot run here, if it cannot.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("a real kubelet needs root (it manages the mounts of its root directory)")
	}
	for _, tool := range Tools {
		if _, err := cluster.Tool(tool); err != nil {
			return fmt.Errorf("%w (run `make node-tools`)", err)
		}
	}
	return nil
}

// Config configures a real-kubelet node.
type Config struct {
	// NodeName is the Node the kubelet registers (--hostname-override).
	NodeName string
	// Cluster is the control plane it joins.
	Cluster *cluster.Cluster
	// Drivers are the CSI drivers to register, by name, each with its node
	// socket for this node ("unix:///path" or a path).
	Drivers map[string]string
	// Dir holds the node's root directory, sockets, configuration and
	// the fake CRI's events; a short path (unix socket paths are
	// limited).
	Dir string
	// LogDir receives kubelet-<node>.log and fake-cri-<node>.log (the
	// cluster's log directory when empty).
	LogDir string
	// WriteInterval is how often each running container writes to each
	// CSI volume it mounts (kubelet.DefaultWriteInterval when zero).
	WriteInterval time.Duration
	// ZombieWrites keeps the containers' writers writing after PowerOff,
	// as the stand-in's option does: a node cut off from the control plane
	// but not from its storage.
	ZombieWrites bool
	// LeaseSeconds is the kubelet's nodeLeaseDurationSeconds (renewed a
	// quarter of that often): cluster.NodeLeaseDurationSeconds, the KWOK
	// nodes' pace, when zero; 40 is the kubelet's default.
	LeaseSeconds int
	// StatusUpdate is the kubelet's nodeStatusUpdateFrequency (1 s when
	// zero; 10 s is the kubelet's default).
	StatusUpdate time.Duration
	// HeldOpen models a process outside the pod's containers that holds
	// its volumes open and writes on after the containers stopped, until
	// the array says the node no longer has a volume (the stand-in's
	// option of the same name stops at the NodeUnpublishVolume).
	HeldOpen bool
}

// Node is a running real-kubelet node. Stop ends it and cleans up.
type Node struct {
	cfg     Config
	root    string
	cri     *cluster.Process
	kubelet *cluster.Process
	// port is the kubelet's port in its current configuration.
	port   int
	wl     *workload
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	powered bool
	frozen  bool
	stopped bool
}

// Start starts the fake CRI (with the drivers' registrations) and the
// kubelet; it returns once the Node is Ready.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.NodeName == "" || cfg.Cluster == nil || cfg.Dir == "" {
		return nil, errors.New("real kubelet: NodeName, Cluster and Dir are required")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	if cfg.LogDir == "" {
		cfg.LogDir = cfg.Cluster.LogDir()
	}
	if cfg.WriteInterval <= 0 {
		cfg.WriteInterval = kubelet.DefaultWriteInterval
	}
	if cfg.LeaseSeconds <= 0 {
		cfg.LeaseSeconds = cluster.NodeLeaseDurationSeconds
	}
	if cfg.StatusUpdate <= 0 {
		cfg.StatusUpdate = time.Second
	}
	n := &Node{cfg: cfg, root: filepath.Join(cfg.Dir, "root"), done: make(chan struct{})}
	for _, d := range []string{n.root, n.workDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("real kubelet %s: %w", cfg.NodeName, err)
		}
	}
	wl, err := newWorkload(cfg.NodeName, n.root, cfg.Drivers, cfg.WriteInterval, cfg.HeldOpen)
	if err != nil {
		return nil, err
	}
	n.wl = wl
	hostPaths.acquire()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	go n.followEvents(wctx)
	if err := n.start(); err != nil {
		n.Stop()
		return nil, err
	}
	if err := cfg.Cluster.WaitNodeReady(ctx, cfg.NodeName, corev1.ConditionTrue, 90*time.Second); err != nil {
		n.Stop()
		return nil, fmt.Errorf("real kubelet %s: %w (log: %s)", cfg.NodeName, err, filepath.Join(cfg.LogDir, "kubelet-"+cfg.NodeName+".log"))
	}
	return n, nil
}

// start boots the node: a new boot ID, a fresh fake CRI (no containers:
// the runtime's state is lost with the power) and the kubelet.
func (n *Node) start() error {
	if err := os.WriteFile(n.bootIDPath(), []byte(string(uuid.NewUUID())+"\n"), 0o644); err != nil {
		return fmt.Errorf("real kubelet %s: boot ID: %w", n.cfg.NodeName, err)
	}
	_ = os.Remove(n.EventsPath())
	n.wl.restart()
	if err := n.startCRI(); err != nil {
		return err
	}
	if err := n.launchKubelet(true); err != nil {
		return err
	}
	n.mu.Lock()
	n.powered, n.frozen = true, false
	n.mu.Unlock()
	return nil
}

// followEvents keeps the workload in step with the fake CRI's containers
// until ctx ends.
func (n *Node) followEvents(ctx context.Context) {
	defer close(n.done)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if n.Powered() {
			_ = n.wl.follow(ctx, n.EventsPath())
		}
	}, 50*time.Millisecond)
}

// Powered reports whether the node is powered on (frozen or not).
func (n *Node) Powered() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.powered
}

// Partitioned reports whether the node is powered on with its kubelet
// frozen: cut off from the control plane while its containers run on.
func (n *Node) Partitioned() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.powered && n.frozen
}

// Writes returns every write attempt of the node's containers so far,
// oldest first.
func (n *Node) Writes() []kubelet.Write { return n.wl.Writes() }

// Freeze stops the kubelet (SIGSTOP), as a hung kubelet or a partition
// from the control plane looks: no heartbeats, no status, no volume
// operation, while the containers run on and keep writing. Thaw resumes
// it where it stopped.
func (n *Node) Freeze() error { return n.signalKubelet(syscall.SIGSTOP, true) }

// Thaw resumes a frozen kubelet (SIGCONT).
func (n *Node) Thaw() error { return n.signalKubelet(syscall.SIGCONT, false) }

func (n *Node) signalKubelet(sig syscall.Signal, frozen bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.powered || n.kubelet == nil {
		return fmt.Errorf("real kubelet %s is powered off", n.cfg.NodeName)
	}
	if err := syscall.Kill(-n.kubelet.PID(), sig); err != nil {
		return fmt.Errorf("signalling the kubelet of %s: %w", n.cfg.NodeName, err)
	}
	n.frozen = frozen
	return nil
}

// PowerOff cuts the node's power: the kubelet and the runtime die at
// once (SIGKILL), and with them the containers' writes, unless
// Config.ZombieWrites keeps them writing.
func (n *Node) PowerOff() {
	n.mu.Lock()
	n.powered = false
	n.mu.Unlock()
	if n.kubelet != nil {
		n.kubelet.Kill() // a frozen kubelet dies without running again
	}
	if n.cri != nil {
		n.cri.Kill()
	}
	if !n.cfg.ZombieWrites {
		n.wl.stopAll()
	}
}

// PowerOn boots the node again with a new boot ID: no container survives
// (the writers stop), the kubelet starts afresh on its root directory,
// reconstructs the volumes it finds there and cleans up those whose pods
// are gone, without force, as upstream does. It returns once the Node is
// Ready.
func (n *Node) PowerOn(ctx context.Context) error {
	n.mu.Lock()
	on := n.powered
	n.mu.Unlock()
	if on {
		return nil
	}
	n.wl.stopAll()
	if err := n.start(); err != nil {
		return err
	}
	return n.cfg.Cluster.WaitNodeReady(ctx, n.cfg.NodeName, corev1.ConditionTrue, 90*time.Second)
}

// CrashKubelet kills the kubelet (SIGKILL): the runtime and its
// containers run on, writing; no status, no volume operation until
// StartKubelet.
func (n *Node) CrashKubelet() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.powered || n.kubelet == nil {
		return fmt.Errorf("real kubelet %s is powered off", n.cfg.NodeName)
	}
	n.kubelet.Kill() // SIGKILL ends a frozen process too, without resuming it first
	n.frozen = false
	return nil
}

// StartKubelet starts a crashed kubelet again on the same boot: it
// rebuilds its state from the runtime, its root directory and the API. It
// returns once the Node is Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	n.mu.Lock()
	on := n.powered
	n.mu.Unlock()
	if !on {
		return fmt.Errorf("real kubelet %s is powered off", n.cfg.NodeName)
	}
	if exited, _ := n.kubelet.Exited(); !exited {
		return fmt.Errorf("the kubelet of %s still runs", n.cfg.NodeName)
	}
	if err := n.launchKubelet(false); err != nil {
		return err
	}
	return n.cfg.Cluster.WaitNodeReady(ctx, n.cfg.NodeName, corev1.ConditionTrue, 90*time.Second)
}

// kubeletLaunches bounds the kubelet's starts in launchKubelet.
const kubeletLaunches = 3

// kubeletServeTimeout bounds how long a kubelet may take to serve its port.
const kubeletServeTimeout = 30 * time.Second

// launchKubelet starts the kubelet (on a configuration with new ports when
// fresh) and waits until it serves its port. A port found free can be
// taken before the kubelet binds it (by another process, or as the local
// port of an outgoing connection), and the kubelet then exits: it is
// started again on other ports, kubeletLaunches times at most.
func (n *Node) launchKubelet(fresh bool) error {
	var err error
	for i := range kubeletLaunches {
		if fresh || i > 0 {
			if err = n.writeConfig(); err != nil {
				return err
			}
		}
		if err = n.startKubelet(); err != nil {
			return err
		}
		if err = n.waitServing(); err == nil {
			return nil
		}
		n.kubelet.Kill()
	}
	return fmt.Errorf("real kubelet %s, started %d times: %w", n.cfg.NodeName, kubeletLaunches, err)
}

// waitServing waits until the kubelet accepts connections on its port,
// and fails at once if it exits first.
func (n *Node) waitServing() error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, kubeletServeTimeout, true, func(ctx context.Context) (bool, error) {
		if exited, werr := n.kubelet.Exited(); exited {
			return false, fmt.Errorf("the kubelet exited before serving %s (see its log): %v", addr, werr)
		}
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
}

func (n *Node) bootIDPath() string { return filepath.Join(n.cfg.Dir, "boot_id") }

func (n *Node) criSocket() string  { return filepath.Join(n.cfg.Dir, "cri.sock") }
func (n *Node) configPath() string { return filepath.Join(n.cfg.Dir, "kubelet.yaml") }

// workDir is the processes' working directory. The kubelet, configured
// as here, empties its working directory when it starts (measured: a file
// put there before is gone once the node is up), so it gets a scratch one
// of its own, never the caller's.
func (n *Node) workDir() string { return filepath.Join(n.cfg.Dir, "cwd") }

// EventsPath is the fake CRI's log of container starts and stops.
func (n *Node) EventsPath() string { return filepath.Join(n.cfg.Dir, "cri-events.jsonl") }

func (n *Node) startCRI() error {
	bin, err := cluster.Tool("fake-cri")
	if err != nil {
		return err
	}
	args := []string{"--endpoint=unix://" + n.criSocket(), "--fs-path=" + n.root, "--events=" + n.EventsPath(),
		"--registry-dir=" + filepath.Join(n.root, "plugins_registry")}
	for name, ep := range n.cfg.Drivers {
		args = append(args, "--register="+name+"="+strings.TrimPrefix(ep, "unix://"))
	}
	p, err := cluster.StartProcessIn(n.workDir(), "fake-cri-"+n.cfg.NodeName, n.cfg.LogDir, bin, args...)
	if err != nil {
		return err
	}
	n.cri = p
	n.cfg.Cluster.Track(p)
	return waitSocket(n.criSocket(), 10*time.Second)
}

func (n *Node) startKubelet() error {
	bin, err := cluster.Tool("kubelet")
	if err != nil {
		return err
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("real kubelet: %w (util-linux)", err)
	}
	// The kubelet authenticates as its node, so that the Node authorizer
	// and NodeRestriction limit it as they limit a real cluster's.
	kubeconfig, err := n.cfg.Cluster.NodeKubeconfig(n.cfg.NodeName)
	if err != nil {
		return fmt.Errorf("real kubelet %s: %w", n.cfg.NodeName, err)
	}
	// The kubelet runs in a mount namespace of its own, where its boot ID
	// is the node's (a power cycle gives a new one, as a reboot does) and
	// where its own mounts (it bind-mounts its root directory onto
	// itself) end with it.
	p, err := cluster.StartProcessIn(n.workDir(), "kubelet-"+n.cfg.NodeName, n.cfg.LogDir, unshare,
		"--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"`, n.bootIDPath(), bin,
		"--config="+n.configPath(),
		"--kubeconfig="+kubeconfig,
		"--root-dir="+n.root,
		"--cert-dir="+filepath.Join(n.cfg.Dir, "pki"),
		"--hostname-override="+n.cfg.NodeName,
		"--node-labels=type=real-kubelet",
		"--v=2",
	)
	if err != nil {
		return err
	}
	n.kubelet = p
	n.cfg.Cluster.Track(p)
	return nil
}

// writeConfig writes the KubeletConfiguration: nothing of the host's
// cgroups, swap or disk is the kubelet's business here, and its heartbeat
// runs at the KWOK nodes' pace (unless Config says otherwise) so that
// kube-controller-manager judges both alike.
func (n *Node) writeConfig() error {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	n.port = ports[0]
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
nodeLeaseDurationSeconds: %d
nodeStatusUpdateFrequency: %s
nodeStatusReportFrequency: %s
syncFrequency: 10s
evictionHard:
  memory.available: "1Ki"
  nodefs.available: "0%%"
  imagefs.available: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
volumePluginDir: %s
podLogsDir: %s
resolvConf: ""
serializeImagePulls: false
localStorageCapacityIsolation: false
`, ports[0], ports[1], n.criSocket(), n.cfg.LeaseSeconds, n.cfg.StatusUpdate, max(n.cfg.StatusUpdate, 10*time.Second),
		filepath.Join(n.cfg.Dir, "volume-plugins"), filepath.Join(n.cfg.Dir, "pod-logs"))
	return os.WriteFile(n.configPath(), []byte(cfg), 0o640)
}

// Stop ends the kubelet and the fake CRI and undoes the kubelet's mounts
// under its root directory (it bind-mounts the directory onto itself).
func (n *Node) Stop() {
	n.mu.Lock()
	stopped := n.stopped
	n.stopped, n.powered = true, false
	n.mu.Unlock()
	if stopped {
		return
	}
	if n.kubelet != nil {
		_ = syscall.Kill(-n.kubelet.PID(), syscall.SIGCONT)
		n.kubelet.Stop(5 * time.Second)
	}
	if n.cri != nil {
		n.cri.Stop(5 * time.Second)
	}
	if n.cancel != nil {
		n.cancel()
		<-n.done
	}
	if n.wl != nil {
		n.wl.close()
	}
	unmountUnder(n.root)
	hostPaths.release()
}

// unmountUnder detaches every mount at or under dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			mounts = append(mounts, f[1])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

// hostPaths are the paths the kubelet creates outside its root directory
// whatever its flags say (its device plugin socket's directory, the
// containers' log links). Those that did not exist before the first
// real-kubelet node on this machine started are removed after the last
// one stopped, counting the nodes of every test process (go test runs
// packages side by side): each process holding nodes keeps a marker in a
// directory under /run, and the list of created paths lives there too.
var hostPaths = &hostState{paths: []string{"/var/lib/kubelet", "/var/log/containers"}, dir: "/run/fenceline-real-kubelets"}

type hostState struct {
	mu      sync.Mutex
	paths   []string
	dir     string
	running int
}

func (h *hostState) acquire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running++
	if h.running > 1 {
		return
	}
	_ = h.locked(func() {
		if len(h.liveMarkers()) == 0 {
			var created []string
			for _, p := range h.paths {
				if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
					created = append(created, p)
				}
			}
			_ = os.WriteFile(filepath.Join(h.dir, "created"), []byte(strings.Join(created, "\n")), 0o644)
		}
		_ = os.WriteFile(h.marker(os.Getpid()), nil, 0o644)
	})
}

func (h *hostState) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running--
	if h.running > 0 {
		return
	}
	_ = h.locked(func() {
		_ = os.Remove(h.marker(os.Getpid()))
		if len(h.liveMarkers()) > 0 {
			return
		}
		b, _ := os.ReadFile(filepath.Join(h.dir, "created"))
		for _, p := range strings.Fields(string(b)) {
			_ = os.RemoveAll(p)
		}
		_ = os.Remove(filepath.Join(h.dir, "created"))
	})
}

func (h *hostState) marker(pid int) string { return filepath.Join(h.dir, "pid-"+strconv.Itoa(pid)) }

// liveMarkers returns the markers of processes still running; those of
// processes that died without releasing are removed.
func (h *hostState) liveMarkers() []string {
	ents, _ := os.ReadDir(h.dir)
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "pid-"))
		if err != nil || !strings.HasPrefix(e.Name(), "pid-") {
			continue
		}
		if syscall.Kill(pid, 0) != nil {
			_ = os.Remove(filepath.Join(h.dir, e.Name()))
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// locked runs fn holding an exclusive lock on the marker directory.
func (h *hostState) locked(fn func()) error {
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(h.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	fn()
	return nil
}

func waitSocket(path string, within time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		c, err := net.Dial("unix", path)
		if err != nil {
			last = err
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("nothing answers on %s after %s: %w", path, within, last)
	}
	return nil
}
