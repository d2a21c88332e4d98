package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// E2EBinary is the test binary of upstream's node e2e specs that `make
// upstream-e2e` builds into the tools directory.
const E2EBinary = "e2e-node.test"

// e2eBinaryPath returns the upstream e2e binary, failing the test with how
// to build it when it is missing.
func e2eBinaryPath(t *testing.T) string {
	t.Helper()
	dir, err := cluster.ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, E2EBinary)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("%s not found or not executable in %s: run `make upstream-e2e` to build upstream's e2e tests (%v)", E2EBinary, dir, err)
	}
	return p
}

// spec is the outcome of one upstream spec.
type spec struct {
	Name    string
	State   string // passed, failed, skipped, pending, panicked, interrupted, aborted, timedout
	RunTime time.Duration
	Failure string // the failure message, if any
}

// suiteResult is the outcome of one run of the upstream binary.
type suiteResult struct {
	Specs   []spec        // the specs whose name matches the focus, in run order
	RunTime time.Duration // wall time of the binary
	Log     string        // the binary's output
	ExitErr error         // its exit error, nil on success
}

// byState returns the names of the specs in state.
func (r suiteResult) byState(state string) []string {
	var names []string
	for _, s := range r.Specs {
		if s.State == state {
			names = append(names, s.Name)
		}
	}
	return names
}

// notPassedOrSkipped returns the specs that neither passed nor were
// skipped: failed, panicked, timed out, interrupted, aborted or pending.
func (r suiteResult) notPassedOrSkipped() []spec {
	var out []spec
	for _, s := range r.Specs {
		if s.State != "passed" && s.State != "skipped" {
			out = append(out, s)
		}
	}
	return out
}

// runUpstreamE2E runs upstream's e2e binary with --ginkgo.focus=focus
// against the cluster of kubeconfig, serially, with its output in
// <logDir>/<name>.log and Ginkgo's JSON report beside it. It returns the
// specs that match focus; an error means the binary could not run or left
// no report (a failed spec is not an error: see suiteResult).
func runUpstreamE2E(ctx context.Context, bin, name, logDir, workDir, kubeconfig, focus string, timeout time.Duration) (suiteResult, error) {
	var res suiteResult
	focusRE, err := regexp.Compile(focus)
	if err != nil {
		return res, fmt.Errorf("focus %q: %w", focus, err)
	}
	report := filepath.Join(logDir, name+"-report.json")
	res.Log = filepath.Join(logDir, name+".log")
	logFile, err := os.Create(res.Log)
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	args := []string{
		"--kubeconfig=" + kubeconfig,
		// No cloud: the framework's fallback provider, said explicitly.
		"--provider=skeleton",
		"--ginkgo.focus=" + focus,
		"--ginkgo.json-report=" + report,
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
		// Where the framework may write files, not the working tree.
		"--e2e-output-dir=" + workDir,
		"--report-dir=" + filepath.Join(workDir, "e2e-report"),
	}
	// Ginkgo stops the specs at --ginkgo.timeout and reports; the process
	// is killed only if it outlives that by a margin.
	ctx, cancel := context.WithTimeout(ctx, timeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = workDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The kubeconfig comes from the flag alone.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBECONFIG=") })
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	fmt.Fprintf(logFile, "+ %s %q\n", bin, args)
	start := time.Now()
	res.ExitErr = cmd.Run()
	res.RunTime = time.Since(start)
	var exitErr *exec.ExitError
	if res.ExitErr != nil && !errors.As(res.ExitErr, &exitErr) {
		return res, fmt.Errorf("running %s: %w", bin, res.ExitErr)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		return res, fmt.Errorf("%s left no report (exit: %v; see %s): %w", bin, res.ExitErr, res.Log, err)
	}
	if res.Specs, err = parseGinkgoReport(data, focusRE); err != nil {
		return res, fmt.Errorf("%s: %w", report, err)
	}
	return res, nil
}

// ginkgoReport is the part of Ginkgo's JSON report (a list of
// types.Report) that the harness reads.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		RunTime                 time.Duration
		Failure                 struct{ Message string }
	}
}

// parseGinkgoReport returns the It specs of a Ginkgo JSON report whose full
// name matches focus; a report lists every spec, the ones the focus left
// out as skipped.
func parseGinkgoReport(data []byte, focus *regexp.Regexp) ([]spec, error) {
	var reports []ginkgoReport
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("decoding Ginkgo report: %w", err)
	}
	var out []spec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				continue
			}
			name := strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
			if !focus.MatchString(name) {
				continue
			}
			out = append(out, spec{Name: name, State: s.State, RunTime: s.RunTime, Failure: s.Failure.Message})
		}
	}
	return out, nil
}

// checkSuite fails the test unless every focused spec that was not
// expected to be skipped passed, and logs the passed, failed and skipped
// specs. expectSpecs is how many specs the focus selects upstream.
func checkSuite(t *testing.T, res suiteResult, expectSpecs int) {
	t.Helper()
	t.Logf("upstream e2e suite: %d specs in %s (its output, %s, is among the component logs)", len(res.Specs), res.RunTime.Round(time.Second), filepath.Base(res.Log))
	for _, s := range res.Specs {
		t.Logf("  %-8s %-6s %s", s.State, s.RunTime.Round(time.Second), s.Name)
	}
	passed, skipped := res.byState("passed"), res.byState("skipped")
	bad := res.notPassedOrSkipped()
	t.Logf("passed %d, failed %d, skipped %d", len(passed), len(bad), len(skipped))
	for _, s := range bad {
		t.Errorf("%s: %s\n%s", s.State, s.Name, s.Failure)
	}
	if len(res.Specs) != expectSpecs {
		t.Errorf("the focus selected %d specs, want %d: did upstream's suite change?", len(res.Specs), expectSpecs)
	}
	if len(skipped) > 0 {
		t.Errorf("skipped specs: %q", skipped)
	}
	if res.ExitErr != nil && len(bad) == 0 {
		t.Errorf("%s exited with %v although no spec failed; see %s", E2EBinary, res.ExitErr, res.Log)
	}
}
