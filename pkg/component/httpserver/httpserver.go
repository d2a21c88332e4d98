// Package httpserver serves a Fenceline component's metrics and health
// checks on --http-endpoint, the same way in both binaries.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/stdmetrics"
)

const (
	// HealthPath is the liveness check of kube components.
	HealthPath = "/healthz"
	// LeaderElectionHealthPath is the same check on the path the
	// kubernetes-csi sidecars serve it, so that an upstream liveness probe
	// keeps working.
	LeaderElectionHealthPath = "/healthz/leader-election"
	// shutdownTimeout bounds how long Stop waits for requests in flight.
	shutdownTimeout = 5 * time.Second
)

// Config is what the server serves.
type Config struct {
	// Address is host:port to listen on.
	Address string
	// MetricsPath serves Metrics together with the standard series of
	// every Kubernetes component (see stdmetrics).
	MetricsPath string
	Metrics     prometheus.Gatherer
	// Health, when set, fails the health checks when it returns an error:
	// the leader-election watchdog.
	Health func(*http.Request) error
}

// Server is a running HTTP server.
type Server struct {
	addr string
	srv  *http.Server
	done chan struct{}
	ctx  context.Context
}

// Start listens on cfg.Address and serves until Stop. The listener is
// bound before Start returns, so that a busy port is an error of the
// component's start, not a log line.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	mux := http.NewServeMux()
	if cfg.Metrics != nil {
		mux.Handle(cfg.MetricsPath, stdmetrics.Handler(cfg.Metrics))
	}
	health := func(w http.ResponseWriter, r *http.Request) {
		if cfg.Health != nil {
			if err := cfg.Health(r); err != nil {
				http.Error(w, fmt.Sprintf("leader election: %v", err), http.StatusInternalServerError)
				return
			}
		}
		_, _ = fmt.Fprint(w, "ok")
	}
	mux.HandleFunc(HealthPath, health)
	mux.HandleFunc(LeaderElectionHealthPath, health)
	l, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on --http-endpoint %s: %w", cfg.Address, err)
	}
	s := &Server{
		addr: l.Addr().String(),
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done: make(chan struct{}),
		ctx:  ctx,
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server failed", "address", s.addr)
		}
	}()
	klog.FromContext(ctx).Info("Serving metrics and health checks", "address", s.addr, "metricsPath", cfg.MetricsPath)
	return s, nil
}

// Addr is the address the server listens on (with the port the system
// chose for ":0").
func (s *Server) Addr() string { return s.addr }

// Stop shuts the server down gracefully: requests in flight get a few
// seconds to finish. It returns once the server has stopped.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), shutdownTimeout)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}
