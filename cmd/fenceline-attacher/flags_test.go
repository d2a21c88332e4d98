package main

import (
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"
)

// upstreamArgs is a command line using every upstream flag with a value.
var upstreamArgs = []string{
	"--csi-address=/csi/csi.sock", "--kubeconfig=/etc/kubeconfig", "--resync=5m", "--timeout=30s",
	"--retry-interval-start=2s", "--retry-interval-max=1m", "--worker-threads=20", "--max-entries=100",
	"--default-fstype=ext4", "--reconcile-sync=2m", "--max-grpc-log-length=200",
	"--feature-gates=LoggingBetaOptions=true", "--leader-election", "--leader-election-namespace=kube-system",
	"--leader-election-lease-duration=20s", "--leader-election-renew-deadline=15s",
	"--leader-election-retry-period=3s", "--leader-election-labels=a:b,c:d", "--kube-api-qps=50",
	"--kube-api-burst=100", "--http-endpoint=:8080", "--metrics-path=/m", "-v=5", "--logging-format=text",
	"--automaxprocs=false",
}

var (
	parseOnce sync.Once
	parsed    *config
	errParsed error
)

// parseUpstream parses upstreamArgs on flag.CommandLine, once per process:
// standardflags binds process-wide state.
func parseUpstream(t *testing.T) *config {
	t.Helper()
	parseOnce.Do(func() { parsed, errParsed = parseFlags(flag.CommandLine, upstreamArgs) })
	if errParsed != nil {
		t.Fatalf("parseFlags: %v", errParsed)
	}
	return parsed
}

// TestUpstreamCommandLine parses a command line using every flag of the
// upstream external-attacher (v4.13) and checks that each lands where it
// should.
func TestUpstreamCommandLine(t *testing.T) {
	c := parseUpstream(t)
	if err := c.applyLogging(); err != nil {
		t.Fatalf("applyLogging: %v", err)
	}
	o := c.opts
	checks := []struct {
		name      string
		got, want any
	}{
		{"csi-address", o.CSIAddress, "/csi/csi.sock"},
		{"kubeconfig", o.Kubeconfig, "/etc/kubeconfig"},
		{"resync", o.Resync, 5 * time.Minute},
		{"timeout", o.Timeout, 30 * time.Second},
		{"retry-interval-start", o.RetryIntervalStart, 2 * time.Second},
		{"retry-interval-max", o.RetryIntervalMax, time.Minute},
		{"worker-threads", o.WorkerThreads, 20},
		{"max-entries", o.MaxEntries, 100},
		{"default-fstype", o.DefaultFSType, "ext4"},
		{"reconcile-sync", o.ReconcileSync, 2 * time.Minute},
		{"max-grpc-log-length", o.MaxGRPCLogLength, 200},
		{"leader-election", o.LeaderElection, true},
		{"leader-election-namespace", o.LeaderElectionNamespace, "kube-system"},
		{"leader-election-lease-duration", o.LeaderElectionLeaseDuration, 20 * time.Second},
		{"leader-election-renew-deadline", o.LeaderElectionRenewDeadline, 15 * time.Second},
		{"leader-election-retry-period", o.LeaderElectionRetryPeriod, 3 * time.Second},
		{"leader-election-labels", fmt.Sprint(o.LeaderElectionLabels), "map[a:b c:d]"},
		{"kube-api-qps", o.KubeAPIQPS, 50.0},
		{"kube-api-burst", o.KubeAPIBurst, 100},
		{"http-endpoint", o.HTTPEndpoint, ":8080"},
		{"metrics-path", o.MetricsPath, "/m"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("--%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// upstreamFlags are the flags of the upstream external-attacher v4.13 with
// their defaults as its --help prints them ("" where the default is empty or
// not printed). Every one must exist with the same default.
var upstreamFlags = map[string]string{
	"automaxprocs": "", "csi-address": "/run/csi/socket", "default-fstype": "", "feature-gates": "",
	"http-endpoint": "", "kube-api-burst": "10", "kube-api-qps": "5", "kubeconfig": "",
	"leader-election": "false", "leader-election-labels": "", "leader-election-lease-duration": "15s",
	"leader-election-namespace": "", "leader-election-renew-deadline": "10s", "leader-election-retry-period": "5s",
	"log-flush-frequency": "5s", "log-json-info-buffer-size": "", "log-json-split-stream": "false",
	"log-text-info-buffer-size": "", "log-text-split-stream": "false", "logging-format": "text",
	"max-entries": "0", "max-grpc-log-length": "-1", "metrics-address": "", "metrics-path": "/metrics",
	"reconcile-sync": "1m0s", "resync": "10m0s", "retry-interval-max": "5m0s", "retry-interval-start": "1s",
	"timeout": "15s", "v": "", "version": "false", "vmodule": "", "worker-threads": "10",
}

// TestSameFlagsAsUpstream checks names and defaults (DefValue is unaffected
// by parsing).
func TestSameFlagsAsUpstream(t *testing.T) {
	parseUpstream(t)
	for name, def := range upstreamFlags {
		f := flag.CommandLine.Lookup(name)
		if f == nil {
			t.Errorf("--%s is missing", name)
			continue
		}
		if def != "" && f.DefValue != def {
			t.Errorf("--%s default = %q, want upstream's %q", name, f.DefValue, def)
		}
	}
}
