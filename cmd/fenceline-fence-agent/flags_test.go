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
	"fenceline.io/fenceline/pkg/fenceagent/app"
	"fenceline.io/fenceline/test/cluster"
)

func parse(args ...string) (*command.Config[app.Options], error) {
	fs := flag.NewFlagSet("fenceline-fence-agent", flag.ContinueOnError)
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
		{"deployment's flags", []string{"--leader-election", "--leader-election-namespace=fenceline-system", "--probe-interval=60s", "--http-endpoint=:8080", "--v=2"}, cli.ExitOK, ""},
		{"version", []string{"--version"}, cli.ExitOK, ""},
		{"help", []string{"--help"}, cli.ExitOK, ""},
		{"logging and client-go gates", []string{"--feature-gates=LoggingBetaOptions=true,WatchListClient=false", "--logging-format=json"}, cli.ExitOK, ""},
		{"unknown flag", []string{"--bogus"}, cli.ExitUsage, "flag provided but not defined"},
		{"positional argument", []string{"--workers=2", "probe"}, cli.ExitUsage, "unexpected positional arguments"},
		{"invalid duration", []string{"--probe-interval=often"}, cli.ExitUsage, "invalid value"},
		{"interval too short", []string{"--probe-interval=10ms"}, cli.ExitUsage, "--probe-interval must be at least 1s"},
		{"invalid value", []string{"--workers=0"}, cli.ExitUsage, "--workers must be at least 1"},
		{"no fence worker", []string{"--fence-workers=0"}, cli.ExitUsage, "--fence-workers must be at least 1"},
		{"no credentials namespace", []string{"--credentials-namespace="}, cli.ExitUsage, "--credentials-namespace"},
		{"unknown feature gate", []string{"--feature-gates=NoSuchGate=true"}, cli.ExitUsage, "unrecognized feature gate"},
		{"bad logging format", []string{"--logging-format=xml"}, cli.ExitUsage, "logging configuration"},
		{"lease shorter than renew deadline", []string{"--leader-election", "--leader-election-lease-duration=5s"}, cli.ExitUsage, "--leader-election-lease-duration"},
		{"bad value with --version", []string{"--workers=0", "--version"}, cli.ExitUsage, "--workers"},
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

// TestFlagDefaults: the probe's 60 s interval, its own Lease and the
// namespace of the credentials.
func TestFlagDefaults(t *testing.T) {
	c, err := parse("--leader-election")
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options
	if !o.LeaderElection || o.LeaseName != "fenceline-fence-agent" || o.LeaderElectionNamespace != "fenceline-system" ||
		o.ProbeInterval != time.Minute || o.FenceWorkers != 4 || o.CredentialsNamespace != "fenceline-system" || o.LeaseDuration != 15*time.Second {
		t.Errorf("unexpected defaults: %+v", o)
	}
	if _, err := parse("--help"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
}

// TestBinaryExitCodes runs the built binary (make build): a wrong command
// line exits 2 before any kubeconfig is loaded; --version exits 0.
func TestBinaryExitCodes(t *testing.T) {
	bin, err := cluster.Binary("fenceline-fence-agent")
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
		{"version", []string{"--version"}, 0, "fenceline-fence-agent"},
		{"unknown flag", []string{noCluster, "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"positional argument", []string{noCluster, "probe"}, 2, "unexpected positional arguments"},
		{"invalid value", []string{noCluster, "--workers=0"}, 2, "--workers must be at least 1"},
		{"bad feature gate", []string{noCluster, "--feature-gates=NoSuchGate=true"}, 2, "unrecognized feature gate"},
		{"no cluster", []string{noCluster}, 1, "/nonexistent/kubeconfig"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, tc.args...)
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
		})
	}
}
