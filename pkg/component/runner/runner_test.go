package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"fenceline.io/fenceline/test/cluster"
)

func TestRegistry(t *testing.T) {
	own := prometheus.NewRegistry()
	if got, err := Registry(own); err != nil || got != own {
		t.Fatalf("Registry(own) = %p, %v; want the same registry", got, err)
	}
	got, err := Registry(nil)
	if err != nil {
		t.Fatal(err)
	}
	families, err := got.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !names[want] {
			t.Errorf("new registry lacks %s", want)
		}
	}
}

// TestRunWithoutLeaderElection: the work runs while /healthz answers, its
// error is Run's, and the server is gone afterwards.
func TestRunWithoutLeaderElection(t *testing.T) {
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	boom := errors.New("work failed")
	cfg := Config{Base: &rest.Config{Host: "https://127.0.0.1:1"}, Component: "test", HTTPEndpoint: addr, MetricsPath: "/metrics", Metrics: prometheus.NewRegistry()}
	err = Run(context.Background(), cfg, func(ctx context.Context) error {
		healthy := func(ctx context.Context) (bool, error) {
			res, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false, nil // not listening yet
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK, nil
		}
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, healthy); err != nil {
			return fmt.Errorf("healthz never answered OK: %w", err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the work's error", err)
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("HTTP server still answers after Run returned")
	}
}
