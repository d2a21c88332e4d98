package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

var fastAPIWait = APIWait{Try: time.Second, Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 50 * time.Millisecond}}

func versionClient(t *testing.T, url string) rest.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	return c.Discovery().RESTClient()
}

// TestWaitForAPIServerRetriesUntilReachable: an API server that fails three
// times is retried, each failure logged at default verbosity, and the wait
// ends when it answers.
func TestWaitForAPIServerRetriesUntilReachable(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"major":"1","minor":"37","gitVersion":"v1.37.1"}`))
	}))
	defer srv.Close()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	if err := WaitForAPIServer(ctx, versionClient(t, srv.URL), fastAPIWait); err != nil {
		t.Fatalf("WaitForAPIServer: %v", err)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("GET /version called %d times, want 4", n)
	}
	errors := 0
	for _, e := range buf.Data() {
		if e.Type == ktesting.LogError && e.Message == "Kubernetes API server unreachable; retrying" {
			errors++
		}
	}
	if errors != 3 {
		t.Errorf("%d error log entries for the failures, want 3", errors)
	}
}

// TestWaitForAPIServerStopsOnCancel: with nothing listening, the wait ends
// as soon as its context does (a SIGTERM), not after a request timeout.
func TestWaitForAPIServerStopsOnCancel(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more: connection refused
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	slow := fastAPIWait
	slow.Backoff.Duration, slow.Backoff.Cap = time.Hour, time.Hour
	done := make(chan error, 1)
	go func() { done <- WaitForAPIServer(ctx, versionClient(t, url), slow) }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("WaitForAPIServer returned nil for an unreachable API server")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitForAPIServer did not return within 5s of its context ending")
	}
}
