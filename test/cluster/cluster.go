// Package cluster runs a real, throw-away Kubernetes control plane on
// loopback for integration tests, end-to-end tests, benchmarks and the demo:
// etcd, kube-apiserver and, on request, kube-controller-manager,
// kube-scheduler and KWOK (which plays the kubelets of simulated nodes).
//
// Every component is a real binary (see ToolsDir) started as its own process
// group on random free ports, with token authentication and RBAC. Start
// waits on health endpoints, never on fixed sleeps, and stops everything it
// started when the test ends, however it ends.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options selects the optional components. etcd and kube-apiserver always run.
type Options struct {
	// ControllerManager starts kube-controller-manager with short node
	// monitor timings (period 1 s, grace 5 s).
	ControllerManager bool
	// Scheduler starts kube-scheduler.
	Scheduler bool
	// KWOK starts KWOK, which simulates the kubelets of nodes added with
	// AddNode.
	KWOK bool
	// LogDir receives one log file per component. Empty means a directory
	// inside the run directory; Start copies it to test/output/<TestName>
	// when the test fails.
	LogDir string
	// ExtraControllerManagerArgs are appended to kube-controller-manager's
	// command line (a later flag overrides an earlier one).
	ExtraControllerManagerArgs []string
	// NodeLeaseSeconds is the node Lease duration KWOK writes for its
	// nodes (it renews them a quarter of that often); 0 means
	// NodeLeaseDurationSeconds. Benchmarks at production timings set the
	// kubelet's default, 40.
	NodeLeaseSeconds int
	// KWOKParallelism is how many node Leases, node stages and pod stages
	// KWOK works on at once; 0 keeps KWOK's default of 4, plenty for tens
	// of nodes. Thousands of nodes need more for every Lease to be renewed
	// in time.
	KWOKParallelism int
	// NodeStatusInterval is how often KWOK posts the status of a Ready
	// node again (its heartbeat stage), each time after that interval plus
	// up to a tenth of it; 0 keeps the harness's 20-25 s. A kubelet posts
	// an unchanged status every 5 minutes (nodeStatusReportFrequency): its
	// Lease is what shows it alive.
	NodeStatusInterval time.Duration
	// AuditLog makes kube-apiserver write every request at level Metadata
	// to AuditLogPath (JSON lines), so that a test can check which API calls
	// each component made against its RBAC (see test/rbaccheck).
	AuditLog bool
}

// Timings the harness gives kube-controller-manager and KWOK. Tests and the
// demo use them to size their deadlines.
const (
	// NodeMonitorGracePeriod is how long a node may miss heartbeats before
	// kube-controller-manager marks it NotReady/Unknown.
	NodeMonitorGracePeriod = 5 * time.Second
	// NodeLeaseDurationSeconds is the node lease duration KWOK writes; it
	// renews a quarter of that often.
	NodeLeaseDurationSeconds = 4
)

// Cluster is a running control plane. Its methods are safe for concurrent use.
type Cluster struct {
	dir        string
	logDir     string
	pki        *pki
	adminToken string
	serverURL  string
	etcdURL    string

	auditLog string // empty unless Options.AuditLog

	adminConfig     *rest.Config
	adminKubeconfig string
	client          kubernetes.Interface

	mu        sync.Mutex
	processes []*Process // in start order; stopped in reverse
}

// startTimeout bounds the start of the whole control plane.
const startTimeout = 2 * time.Minute

// Start starts a control plane for the test and registers its shutdown with
// t.Cleanup. It skips the test under `go test -short` and fails it with a
// clear message when binaries are missing.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping: needs a local control plane (not run with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Launch(ctx, opts)
	if c != nil {
		t.Cleanup(func() {
			c.Stop()
			if t.Failed() && opts.LogDir == "" {
				if out, err := c.SaveLogs(t.Name()); err != nil {
					t.Logf("saving component logs: %v", err)
				} else {
					t.Logf("component logs saved in %s", out)
				}
			}
			if err := os.RemoveAll(c.dir); err != nil {
				t.Logf("removing %s: %v", c.dir, err)
			}
		})
	}
	if err != nil {
		t.Fatalf("starting local control plane: %v", err)
	}
	return c
}

// Launch starts a control plane outside a test (the demo uses it). The
// caller must call Stop. On error the returned Cluster, if not nil, holds
// what was started so far and must still be stopped.
func Launch(ctx context.Context, opts Options) (*Cluster, error) {
	// Resolve every binary first: a missing one is the most likely failure
	// and must not cost a half-started cluster.
	need := []string{"etcd", "kube-apiserver"}
	if opts.ControllerManager {
		need = append(need, "kube-controller-manager")
	}
	if opts.Scheduler {
		need = append(need, "kube-scheduler")
	}
	if opts.KWOK {
		need = append(need, "kwok")
	}
	bins := map[string]string{}
	var missing []error
	for _, n := range need {
		p, err := Tool(n)
		if err != nil {
			missing = append(missing, err)
		}
		bins[n] = p
	}
	if len(missing) > 0 {
		return nil, errors.Join(missing...)
	}

	// A short directory keeps unix socket paths under the 108-byte limit.
	dir, err := os.MkdirTemp("", "fenceline-")
	if err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	c := &Cluster{dir: dir, logDir: opts.LogDir}
	if c.logDir == "" {
		c.logDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return c, fmt.Errorf("creating log directory: %w", err)
	}
	if opts.AuditLog {
		c.auditLog = filepath.Join(c.logDir, "kube-apiserver-audit.log")
	}
	if c.pki, err = newPKI(dir); err != nil {
		return c, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return c, fmt.Errorf("generating admin token: %w", err)
	}
	c.adminToken = hex.EncodeToString(tok)

	etcdURL, err := c.startEtcd(ctx, bins["etcd"])
	if err != nil {
		return c, err
	}
	c.etcdURL = etcdURL
	if err := c.startAPIServer(ctx, bins["kube-apiserver"], etcdURL); err != nil {
		return c, err
	}
	if opts.ControllerManager {
		if err := c.startControllerManager(ctx, bins["kube-controller-manager"], opts.ExtraControllerManagerArgs); err != nil {
			return c, err
		}
	}
	if opts.Scheduler {
		if err := c.startScheduler(ctx, bins["kube-scheduler"]); err != nil {
			return c, err
		}
	}
	if opts.KWOK {
		if err := c.startKWOK(ctx, bins["kwok"], opts); err != nil {
			return c, err
		}
	}
	return c, nil
}

// AdminConfig returns a copy of the cluster-admin client configuration.
func (c *Cluster) AdminConfig() *rest.Config { return rest.CopyConfig(c.adminConfig) }

// AuditLogPath returns kube-apiserver's audit log, or "" when the cluster
// was started without Options.AuditLog. Read it with rbaccheck.ReadAuditLog.
func (c *Cluster) AuditLogPath() string { return c.auditLog }

// AdminKubeconfig returns the path of a kubeconfig file for cluster-admin.
func (c *Cluster) AdminKubeconfig() string { return c.adminKubeconfig }

// Client returns a cluster-admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// ServerURL returns the https URL of kube-apiserver.
func (c *Cluster) ServerURL() string { return c.serverURL }

// Dir returns the run directory; it is removed when the test ends. Paths in
// it are short enough for unix sockets.
func (c *Cluster) Dir() string { return c.dir }

// LogDir returns the directory holding one log file per component. Other
// processes a test starts should log here too, so that a failure collects
// them with the control plane's logs.
func (c *Cluster) LogDir() string { return c.logDir }

// Track adds a process the caller started to the set that Stop ends, so
// that it stops before the control plane does.
func (c *Cluster) Track(p *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes = append(c.processes, p)
}

// Processes returns every process the cluster will stop, in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.processes...)
}

// Stop stops every tracked process, newest first. It is idempotent.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.processes
	c.processes = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(10 * time.Second)
	}
}

// SaveLogs copies the component logs to <repo>/test/output/<name>/ and
// returns that directory.
func (c *Cluster) SaveLogs(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "test", "output", sanitize(name))
	if err := os.RemoveAll(out); err != nil {
		return "", fmt.Errorf("clearing %s: %w", out, err)
	}
	if err := os.CopyFS(out, os.DirFS(c.logDir)); err != nil {
		return "", fmt.Errorf("copying logs to %s: %w", out, err)
	}
	return out, nil
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		case r == '/':
			return '/'
		}
		return '_'
	}, name)
}
