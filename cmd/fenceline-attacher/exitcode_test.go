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
		// started: the command line was accepted and the attacher went on
		// to load the kubeconfig (and failed there).
		started bool
	}{
		{"version", []string{"--version"}, 0, "fenceline-attacher", false},
		{"unknown flag", []string{"--bogus"}, 2, "flag provided but not defined: -bogus", false},
		// As upstream: a stray positional argument is ignored (and named),
		// values upstream accepts start, and what upstream rejects after
		// parsing exits 1 before the kubeconfig is loaded.
		{"positional argument", []string{"csi.sock"}, 1, "are ignored, as upstream ignores them", true},
		{"unwise value upstream accepts", []string{"--timeout=0"}, 1, "--timeout=0s: every CSI call times out", true},
		{"invalid value", []string{"--worker-threads=0"}, 1, "--worker-threads must be greater than zero", false},
		{"both metrics endpoints", []string{"--http-endpoint=:8080", "--metrics-address=:8081"}, 1, "only one of", false},
		{"bad feature gate", []string{"--feature-gates=NoSuchGate=true"}, 2, "unrecognized feature gate", false},
		{"bad leader election timing", []string{"--leader-election", "--leader-election-renew-deadline=20s"}, 1, "--leader-election-lease-duration", false},
		{"no cluster", nil, 1, "/nonexistent/kubeconfig", true},
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
			if loaded := strings.Contains(string(out), "/nonexistent/kubeconfig"); loaded != tc.started {
				t.Errorf("kubeconfig loaded: %v, want %v:\n%s", loaded, tc.started, out)
			}
		})
	}
}
