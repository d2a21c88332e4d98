package httpserver

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
)

// TestServer: metrics on their path, both health paths follow the health
// check, and Stop leaves nothing listening.
func TestServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "fenceline_test_total"}))
	var unhealthy atomic.Bool
	srv, err := Start(ctx, Config{Address: "127.0.0.1:0", MetricsPath: "/m", Metrics: reg, Health: func(*http.Request) error {
		if unhealthy.Load() {
			return errors.New("lease not renewed")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/m"); code != http.StatusOK || !strings.Contains(body, "fenceline_test_total 0") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /m = %d:\n%s", code, body)
	}
	for _, path := range []string{HealthPath, LeaderElectionHealthPath} {
		unhealthy.Store(false)
		if code, body := get(path); code != http.StatusOK || body != "ok" {
			t.Errorf("GET %s healthy = %d %q", path, code, body)
		}
		unhealthy.Store(true)
		if code, body := get(path); code != http.StatusInternalServerError || !strings.Contains(body, "lease not renewed") {
			t.Errorf("GET %s unhealthy = %d %q", path, code, body)
		}
	}
	srv.Stop()
	if _, err := http.Get("http://" + srv.Addr() + HealthPath); err == nil {
		t.Error("server still answers after Stop")
	}
}
