package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// TestBinaryExitCodes runs the built binary (make build) with each
// command-line convention it shares with fenceline-controller: a wrong
// command line exits 2 with a message, before the kubeconfig is loaded;
// --version exits 0. parseFlags binds process-wide flags, so this runs the
// binary rather than the function.
func TestBinaryExitCodes(t *testing.T) {
	bin, err := cluster.Binary("fenceline-attacher")
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	noCluster := []string{"--kubeconfig=/nonexistent/kubeconfig", "--csi-address=/nonexistent/csi.sock"}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"version", []string{"--version"}, 0, "fenceline-attacher"},
		{"unknown flag", []string{"--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"positional argument", []string{"csi.sock"}, 2, "unexpected positional arguments"},
		{"invalid value", []string{"--worker-threads=0"}, 2, "--worker-threads must be positive"},
		{"bad feature gate", []string{"--feature-gates=NoSuchGate=true"}, 2, "unrecognized feature gate"},
		{"bad leader election timing", []string{"--leader-election", "--leader-election-renew-deadline=20s"}, 2, "--leader-election-lease-duration"},
		{"no cluster", nil, 1, "/nonexistent/kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, append(append([]string(nil), noCluster...), tc.args...)...)
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(string(out), tc.wantOut) {
				t.Errorf("exit %d, want %d with %q in:\n%s", code, tc.wantCode, tc.wantOut, out)
			}
			if tc.wantCode == 2 && strings.Contains(string(out), "load Kubernetes client configuration") {
				t.Errorf("a usage error loaded the kubeconfig:\n%s", out)
			}
		})
	}
}
