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
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/test/cluster"
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
}

// Node is a running real-kubelet node. Stop ends it and cleans up.
type Node struct {
	cfg     Config
	root    string
	cri     *cluster.Process
	kubelet *cluster.Process
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
	n := &Node{cfg: cfg, root: filepath.Join(cfg.Dir, "root")}
	for _, d := range []string{n.root, n.workDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("real kubelet %s: %w", cfg.NodeName, err)
		}
	}
	hostPaths.acquire()
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

func (n *Node) start() error {
	if err := n.startCRI(); err != nil {
		return err
	}
	if err := n.writeConfig(); err != nil {
		return err
	}
	return n.startKubelet()
}

func (n *Node) criSocket() string  { return filepath.Join(n.cfg.Dir, "cri.sock") }
func (n *Node) configPath() string { return filepath.Join(n.cfg.Dir, "kubelet.yaml") }

// workDir is the processes' working directory. The kubelet, configured
// as here, empties its working directory when it starts (measured: a file
// put there before is gone once the node is up), so it gets a scratch one
// of its own, never the caller's.
func (n *Node) workDir() string { return filepath.Join(n.cfg.Dir, "cwd") }

// EventsPath is the fake CRI's log of container starts and stops.
func (n *Node) EventsPath() string { return filepath.Join(n.cfg.Dir, "cri-events.jsonl") }

// RootDir is the kubelet's --root-dir.
func (n *Node) RootDir() string { return n.root }

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
	p, err := cluster.StartProcessIn(n.workDir(), "kubelet-"+n.cfg.NodeName, n.cfg.LogDir, bin,
		"--config="+n.configPath(),
		"--kubeconfig="+n.cfg.Cluster.AdminKubeconfig(),
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
// runs at the KWOK nodes' pace so that kube-controller-manager judges both
// alike.
func (n *Node) writeConfig() error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
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
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 10s
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
`, ports[0], ports[1], n.criSocket(), cluster.NodeLeaseDurationSeconds,
		filepath.Join(n.cfg.Dir, "volume-plugins"), filepath.Join(n.cfg.Dir, "pod-logs"))
	return os.WriteFile(n.configPath(), []byte(cfg), 0o640)
}

// Stop ends the kubelet and the fake CRI and undoes the kubelet's mounts
// under its root directory (it bind-mounts the directory onto itself).
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.Stop(5 * time.Second)
	}
	if n.cri != nil {
		n.cri.Stop(5 * time.Second)
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
// real-kubelet node of this process started are removed after its last
// one stopped.
var hostPaths = &hostState{paths: []string{"/var/lib/kubelet", "/var/log/containers"}}

type hostState struct {
	mu      sync.Mutex
	paths   []string
	running int
	created []string
}

func (h *hostState) acquire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == 0 {
		h.created = nil
		for _, p := range h.paths {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				h.created = append(h.created, p)
			}
		}
	}
	h.running++
}

func (h *hostState) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running--
	if h.running > 0 {
		return
	}
	for _, p := range h.created {
		_ = os.RemoveAll(p)
	}
}

func waitSocket(path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing answers on %s after %s: %w", path, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
