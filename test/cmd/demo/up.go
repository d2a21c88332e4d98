package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// upState is what `make up` records under .cache/demo/up/ for `make down`.
type upState struct {
	// PID is the background process holding the world; stopping it stops
	// every component.
	PID int `json:"pid"`
	// Components are the component processes (name -> PID), so that
	// `make down` can make sure none outlives the world.
	Components map[string]int `json:"components"`
	Kubeconfig string         `json:"kubeconfig"`
	LogDir     string         `json:"logDir"`
	Started    time.Time      `json:"started"`
	// BMCs are the nodes' simulated Redfish BMCs by node name.
	BMCs map[string]upBMC `json:"bmcs,omitempty"`
	// Metrics are the components' metrics URLs by process name.
	Metrics map[string]string `json:"metrics,omitempty"`
}

// upBMC is one node's simulated BMC, as an explorer reaches it.
type upBMC struct {
	// URL is the node's Redfish ComputerSystem.
	URL string `json:"url"`
	// Secret is the credentials Secret (fenceline-system/<name>, keys
	// username and password).
	Secret string `json:"secret"`
}

func upDir() (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "demo", "up"), nil
}

func readState(dir string) (*upState, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var s upState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, "state.json"), err)
	}
	return &s, nil
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// runs reports whether pid still runs the named binary, so that a PID the
// kernel reused for another program is never signalled.
func runs(pid int, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return filepath.Base(argv0) == name
}

// runUp starts `--serve` as a detached background process and returns once
// it reports the world ready.
func runUp() error {
	dir, err := upDir()
	if err != nil {
		return err
	}
	if s, err := readState(dir); err == nil && alive(s.PID) {
		return fmt.Errorf("a world is already running (pid %d, kubeconfig %s); run `make down` first", s.PID, s.Kubeconfig)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	_ = os.Remove(filepath.Join(dir, "state.json"))
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the demo binary: %w", err)
	}
	logPath := filepath.Join(dir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer logFile.Close()
	cmd := exec.Command(self, "--serve")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the background world: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Printf("starting the world in the background (pid %d, progress in %s)...\n", cmd.Process.Pid, logPath)
	var s *upState
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, false, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			return false, fmt.Errorf("the background world exited (%v); see %s", err, logPath)
		default:
		}
		var err error
		s, err = readState(dir)
		return err == nil, nil
	})
	if wait.Interrupted(err) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		return fmt.Errorf("the background world was not ready within 5 minutes; see %s", logPath)
	}
	if err != nil {
		return err
	}
	printUp(s)
	return nil
}

// printUp tells an explorer what runs and how to make a node fail.
func printUp(s *upState) {
	fmt.Printf("\nFenceline is running: 3 KWOK nodes with a simulated Redfish BMC each, the mock driver,\n")
	fmt.Printf("fenceline-attacher, fenceline-controller and fenceline-fence-agent, and a sample StatefulSet db\n")
	fmt.Printf("in namespace %s: 3 pods, a ReadWriteOnce volume each.\n\n", demoNamespace)
	fmt.Printf("  export KUBECONFIG=%s\n", s.Kubeconfig)
	fmt.Printf("  kubectl get nodes,pods -A -o wide        # kubectl is in .cache/tools/bin\n")
	fmt.Printf("  kubectl -n %s get pods,pvc -o wide\n", demoNamespace)
	fmt.Printf("  kubectl get fencetargets,fencepolicies,fencingrequests,storagefences\n")
	fmt.Printf("  bin/kubectl-fenceline status               # the kubectl plugin\n\n")
	fmt.Printf("Make node-a stop heartbeating (KWOK lets it go) and watch it fenced with no human, its pods\n")
	fmt.Printf("moved with their volumes fenced off node-a first, and the storage's fence shown as a StorageFence:\n\n")
	fmt.Printf("  kubectl label node node-a %s-\n", cluster.PoweredLabel)
	fmt.Printf("  kubectl get fencingrequests -w\n")
	fmt.Printf("  kubectl -n %s get pods -o wide -w\n\n", demoNamespace)
	if b, ok := s.BMCs["node-a"]; ok {
		fmt.Printf("Once it is Fenced, power it on through its BMC; it comes back with a new boot ID and is unfenced:\n\n")
		for _, key := range []string{"username", "password"} {
			fmt.Printf("  BMC_%s=$(kubectl -n %s get secret %s -o jsonpath='{.data.%s}' | base64 -d)\n", strings.ToUpper(key[:4]), world.Namespace, b.Secret, key)
		}
		fmt.Printf("  curl -sk -u \"$BMC_USER:$BMC_PASS\" -H 'Content-Type: application/json' -d '{\"ResetType\":\"On\"}' \\\n      %s/Actions/ComputerSystem.Reset\n\n", b.URL)
	}
	if len(s.Metrics) > 0 {
		fmt.Printf("Every component's metrics (the series the alerts of deploy/monitoring read):\n\n")
		for _, name := range slices.Sorted(maps.Keys(s.Metrics)) {
			fmt.Printf("  curl -s %s    # %s\n", s.Metrics[name], name)
		}
		fmt.Println()
	}
	fmt.Printf("Component logs: %s\nStop it with `make down`.\n", s.LogDir)
}

// runServe runs the world until SIGINT/SIGTERM, recording its state for
// `make down`.
func runServe(ctx context.Context) error {
	dir, err := upDir()
	if err != nil {
		return err
	}
	st := stepper{start: time.Now()}
	w, err := startWorld(ctx, st, worldConfig{name: "up", fencing: true, metrics: true})
	if err != nil {
		return err
	}
	defer func() {
		st.printf("stopping")
		w.teardown()
		_ = os.Remove(filepath.Join(dir, "state.json"))
	}()
	// A workload to watch fail over: one pod per node, a volume each.
	if _, _, err := deployDB(ctx, st, w.World, &world.Timeline{}, 3, "", ctx.Done()); err != nil {
		return fmt.Errorf("deploying the sample StatefulSet: %w", err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	data, err := os.ReadFile(w.Cluster.AdminKubeconfig())
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", kubeconfig, err)
	}
	comps := map[string]int{}
	for _, p := range w.Cluster.Processes() {
		comps[p.Name] = p.PID()
	}
	bmcs := map[string]upBMC{}
	for node, b := range w.Fencing.BMCs {
		bmcs[node] = upBMC{URL: b.Address + "/redfish/v1/Systems/" + b.SystemID, Secret: b.SecretName}
	}
	metrics := map[string]string{}
	for _, ep := range w.MetricsEndpoints() {
		metrics[ep.Process] = "http://" + ep.Address + "/metrics"
	}
	state, err := json.Marshal(upState{PID: os.Getpid(), Components: comps, Kubeconfig: kubeconfig, LogDir: w.Cluster.LogDir(), Started: time.Now(), BMCs: bmcs, Metrics: metrics})
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, state, 0o644); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	st.printf("ready; kubeconfig %s", kubeconfig)
	<-ctx.Done()
	return nil
}

// runDown stops the background world and waits until it is gone.
func runDown() error {
	dir, err := upDir()
	if err != nil {
		return err
	}
	s, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no world is running")
		return nil
	}
	if err != nil {
		return err
	}
	if !alive(s.PID) {
		fmt.Printf("world (pid %d) was not running; removing its stale state\n", s.PID)
		return os.Remove(filepath.Join(dir, "state.json"))
	}
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping pid %d: %w", s.PID, err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return !alive(s.PID), nil
	})
	if err != nil {
		// Its children die with it (parent-death signal).
		_ = syscall.Kill(-s.PID, syscall.SIGKILL)
	}
	for name, pid := range s.Components {
		if alive(pid) && runs(pid, name) {
			fmt.Printf("%s (pid %d) outlived the world; killing it\n", name, pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	_ = os.Remove(filepath.Join(dir, "state.json"))
	fmt.Printf("world (pid %d) and its %d components stopped\n", s.PID, len(s.Components))
	return nil
}
