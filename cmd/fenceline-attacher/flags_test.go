package main

import (
	"flag"
	"testing"
	"time"
)

// TestUpstreamCommandLine parses a command line using every flag of the
// upstream external-attacher (v4.13) and checks that each lands where it
// should. standardflags binds process-wide state, so this parses once.
func TestUpstreamCommandLine(t *testing.T) {
	args := []string{
		"--csi-address=/csi/csi.sock", "--kubeconfig=/etc/kubeconfig", "--resync=5m", "--timeout=30s",
		"--retry-interval-start=2s", "--retry-interval-max=1m", "--worker-threads=20", "--max-entries=100",
		"--default-fstype=ext4", "--reconcile-sync=2m", "--max-grpc-log-length=200",
		"--feature-gates=LoggingBetaOptions=true", "--leader-election", "--leader-election-namespace=kube-system",
		"--leader-election-lease-duration=20s", "--leader-election-renew-deadline=15s",
		"--leader-election-retry-period=3s", "--leader-election-labels=a:b,c:d", "--kube-api-qps=50",
		"--kube-api-burst=100", "--http-endpoint=:8080", "--metrics-path=/m", "-v=5", "--logging-format=text",
		"--automaxprocs=false",
	}
	c, err := parseFlags(flag.CommandLine, args)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
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
		{"leader-election-labels", len(o.LeaderElectionLabels), 2},
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
