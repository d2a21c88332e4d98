package main

import (
	"errors"
	"flag"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/pkg/component/cli"
	"fenceline.io/fenceline/pkg/component/command"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/test/cluster"
)

// parse runs binary.Parse on a fresh FlagSet, as main does, with the usage
// output discarded.
func parse(args ...string) (*command.Config[app.Options], error) {
	fs := flag.NewFlagSet("fenceline-controller", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return binary.Parse(fs, args)
}

// TestFlagConventions: each convention of the command line, checked on the
// parsing function (the exit code main derives from its error).
func TestFlagConventions(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantMsg  string
	}{
		{"defaults", nil, cli.ExitOK, ""},
		{"deployment's flags", []string{"--controllers=*", "--leader-election", "--leader-election-namespace=fenceline-system", "--quarantine-delay=40s", "--http-endpoint=:8080", "--v=2"}, cli.ExitOK, ""},
		{"version", []string{"--version"}, cli.ExitOK, ""},
		{"help", []string{"--help"}, cli.ExitOK, ""},
		{"logging and client-go gates", []string{"--feature-gates=LoggingBetaOptions=true,WatchListClient=false", "--logging-format=json"}, cli.ExitOK, ""},
		{"unknown flag", []string{"--bogus"}, cli.ExitUsage, "flag provided but not defined"},
		{"positional argument", []string{"--dry-run", "podgc"}, cli.ExitUsage, "unexpected positional arguments"},
		{"invalid duration", []string{"--resync=soon"}, cli.ExitUsage, "invalid value"},
		{"invalid value", []string{"--workers=0"}, cli.ExitUsage, "--workers must be at least 1"},
		{"unknown controller", []string{"--controllers=*,gc"}, cli.ExitUsage, `unknown controller "gc"`},
		{"unknown feature gate", []string{"--feature-gates=NoSuchGate=true"}, cli.ExitUsage, "unrecognized feature gate"},
		{"malformed feature gate", []string{"--feature-gates=LoggingBetaOptions=maybe"}, cli.ExitUsage, "invalid value"},
		{"bad logging format", []string{"--logging-format=xml"}, cli.ExitUsage, "logging configuration"},
		{"lease shorter than renew deadline", []string{"--leader-election", "--leader-election-lease-duration=5s"}, cli.ExitUsage, "--leader-election-lease-duration"},
		{"bad value with --version", []string{"--workers=0", "--version"}, cli.ExitUsage, "--workers"},
		{"taint-eviction on", []string{"--feature-gates=TaintEviction=true", "--taint-eviction-rate=0.5", "--taint-eviction-zone-label=example.com/rack"}, cli.ExitOK, ""},
		{"node lifecycle conditions on", []string{"--feature-gates=NodeLifecycleConditions=true"}, cli.ExitOK, ""},
		{"taint-eviction named without its gate", []string{"--controllers=*,taint-eviction"}, cli.ExitUsage, "--feature-gates=TaintEviction=true"},
		{"taint-eviction rate not positive", []string{"--taint-eviction-rate=0"}, cli.ExitUsage, "--taint-eviction-rate is 0, must be positive"},
		{"taint-eviction zone threshold out of range", []string{"--taint-eviction-unhealthy-zone-threshold=1.5"}, cli.ExitUsage, "--taint-eviction-unhealthy-zone-threshold is 1.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args...)
			if got := cli.ExitCodeOf(io.Discard, err); got != tc.wantCode {
				t.Fatalf("exit code %d (err %v), want %d", got, err, tc.wantCode)
			}
			if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tc.wantMsg)
			}
		})
	}
}

// TestFlagDefaults: the kube-style leader-election flags and their
// defaults (kube-controller-manager's 15s/10s/2s).
func TestFlagDefaults(t *testing.T) {
	c, err := parse("--leader-election")
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options
	if !o.LeaderElection || o.LeaderElectionNamespace != "fenceline-system" || o.LeaseDuration != 15*time.Second ||
		o.RenewDeadline != 10*time.Second || o.RetryPeriod != 2*time.Second || o.KubeAPIQPS != 100 || o.KubeAPIBurst != 500 {
		t.Errorf("unexpected defaults: %+v", o)
	}
	if o.FeatureGate == nil {
		t.Error("options carry no feature gate")
	}
	if _, err := parse("--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
}

// TestBinaryExitCodes runs the built binary (make build): a wrong command
// line exits 2 with a message and before any kubeconfig is loaded, even
// when it names one that does not exist; --version exits 0.
func TestBinaryExitCodes(t *testing.T) {
	bin, err := cluster.Binary("fenceline-controller")
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	const noCluster = "--kubeconfig=/nonexistent/kubeconfig"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"version", []string{"--version"}, 0, "fenceline-controller"},
		{"unknown flag", []string{noCluster, "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"positional argument", []string{noCluster, "podgc"}, 2, "unexpected positional arguments"},
		{"invalid value", []string{noCluster, "--workers=0"}, 2, "--workers must be at least 1"},
		{"bad feature gate", []string{noCluster, "--feature-gates=NoSuchGate=true"}, 2, "unrecognized feature gate"},
		{"no cluster", []string{noCluster}, 1, "/nonexistent/kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, bin, tc.args...)
			if code != tc.wantCode || !strings.Contains(out, tc.wantOut) {
				t.Errorf("exit %d, want %d with %q in:\n%s", code, tc.wantCode, tc.wantOut, out)
			}
			if tc.wantCode == 2 && strings.Contains(out, "load Kubernetes client configuration") {
				t.Errorf("a usage error loaded the kubeconfig:\n%s", out)
			}
		})
	}
}

func runBinary(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("running %s: %v", bin, err)
	return 0, ""
}
