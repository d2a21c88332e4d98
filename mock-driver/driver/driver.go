// Package driver starts a complete mock CSI driver in-process: one storage
// array shared by a controller endpoint and any number of node endpoints,
// each a real gRPC server on its own socket. Tests of other components use
// Start instead of running the mock-driver binary; the binary is a thin
// wrapper around the same call.
package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/mock-driver/persist"
	"fenceline.io/fenceline/mock-driver/server"
	"fenceline.io/fenceline/mock-driver/tgt"
)

// File names inside Config.StateDir.
const (
	StateFile = "state.json"
	AuditFile = "audit.jsonl"
)

// Driver is a running mock driver.
type Driver struct {
	cfg       Config
	logger    logr.Logger
	array     *array.Array
	faults    *faults.Injector
	audit     *audit.Log
	servers   []*grpc.Server
	addrs     map[string]string // node ID ("" for the controller endpoint) -> address
	http      *http.Server
	httpAddr  string
	wg        sync.WaitGroup
	stopOnce  sync.Once
	stopCtx   func() bool
	sockPaths []string
	tgt       *tgt.Backend // nil for the memory backend
	addons    string       // the csi-addons socket's address, or ""
}

// Start starts the driver and returns once every endpoint is listening.
// The driver stops when Stop is called or ctx ends. The logger comes from
// ctx (klog.FromContext).
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx).WithValues("driver", cfg.Name)
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	nodes := slices.Collect(maps.Keys(cfg.NodeEndpoints))
	if cfg.NodeID != "" {
		nodes = append(nodes, cfg.NodeID)
	}
	backend, storage, err := startBackend(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var store *persist.Store
	if !cfg.MemoryState {
		store = persist.New(filepath.Join(cfg.StateDir, StateFile))
	}
	arr, err := array.New(array.Options{
		Storage:           storage,
		Store:             store,
		Nodes:             nodes,
		Capacity:          cfg.Capacity,
		MaxVolumesPerNode: cfg.MaxVolumesPerNode,
		Semantics: array.Semantics{
			Fence:          cfg.Fence,
			ForceUnpublish: cfg.ForceUnpublish,
			Unpublish:      unpublishMode(cfg.Unpublish),
			NoAttach:       cfg.NoAttach,
			FakeFence:      cfg.FakeFence,

			MinimalController: cfg.MinimalController,
		},
	})
	if err == nil && backend != nil {
		// A new tgtd knows nothing: serve what the state file holds.
		err = backend.Restore(arr.Snapshot())
	}
	for _, node := range slices.Sorted(maps.Keys(cfg.NodeAddresses)) {
		// The node plugin opens its session with the array: from now on
		// the array knows the address the node reaches it from.
		if err == nil {
			addrs, _ := cfg.nodeAddrs(node) // Validate parsed them
			err = arr.RegisterClient(node, addrs)
		}
	}
	if err != nil {
		stopBackend(backend)
		return nil, err
	}
	auditLog, err := audit.Open(filepath.Join(cfg.StateDir, AuditFile))
	if err != nil {
		stopBackend(backend)
		return nil, err
	}
	d := &Driver{cfg: cfg, logger: logger, array: arr, faults: faults.New(cfg.Faults), audit: auditLog, addrs: map[string]string{}, tgt: backend}
	if rec := arr.Recovered(); rec != nil {
		// Not fatal: refusing to start would only turn a corrupt file into
		// a crash loop. The file is kept aside for a human to look at.
		logger.Error(rec, "State file was corrupt and has been moved aside", "movedTo", rec.MovedTo)
		if err := auditLog.Append(audit.Record{Time: time.Now(), Method: "LoadState", Code: "DataLoss", Message: rec.Error()}); err != nil {
			logger.Error(err, "Could not write the audit log")
		}
	}
	shared := &server.Shared{
		Name:    cfg.Name,
		Version: cfg.Version,
		Array:   arr,
		Faults:  d.faults,
		Audit:   auditLog,
		Metrics: metrics.NewCSIMetricsManagerForPlugin(cfg.Name),
		Logger:  logger,

		ListFences: cfg.ListFences,
		LiftFence:  cfg.LiftFence,
	}
	sockets := []server.Socket{{Endpoint: cfg.Endpoint, NodeID: cfg.NodeID, Controller: true}}
	for _, node := range slices.Sorted(maps.Keys(cfg.NodeEndpoints)) {
		sockets = append(sockets, server.Socket{Endpoint: cfg.NodeEndpoints[node], NodeID: node})
	}
	for _, sock := range sockets {
		if err := d.serve(shared, sock); err != nil {
			d.Stop()
			return nil, err
		}
	}
	if cfg.CSIAddonsEndpoint != "" {
		if err := d.serveAddons(shared); err != nil {
			d.Stop()
			return nil, err
		}
	}
	if cfg.HTTPEndpoint != "" {
		if err := d.serveMetrics(shared.Metrics); err != nil {
			d.Stop()
			return nil, err
		}
	}
	d.stopCtx = context.AfterFunc(ctx, d.Stop)
	return d, nil
}

// serve starts the gRPC server of one socket on its own listener.
func (d *Driver) serve(shared *server.Shared, sock server.Socket) error {
	srv, err := server.NewGRPCServer(shared, sock)
	if err != nil {
		return err
	}
	lis, err := d.listen(sock.Endpoint)
	if err != nil {
		return err
	}
	key := sock.NodeID
	if sock.Controller {
		key = ""
	}
	d.addrs[key] = endpointOf(lis)
	d.servers = append(d.servers, srv)
	d.wg.Go(func() {
		if err := srv.Serve(lis); err != nil {
			d.logger.Error(err, "gRPC server stopped", "endpoint", sock.Endpoint)
		}
	})
	d.logger.Info("Serving", "endpoint", d.addrs[key], "node", sock.NodeID, "controller", sock.Controller)
	return nil
}

// serveAddons starts the gRPC server of the csi-addons socket.
func (d *Driver) serveAddons(shared *server.Shared) error {
	srv := server.NewCSIAddonsServer(shared, d.cfg.CSIAddonsEndpoint)
	lis, err := d.listen(d.cfg.CSIAddonsEndpoint)
	if err != nil {
		return err
	}
	d.addons = endpointOf(lis)
	d.servers = append(d.servers, srv)
	d.wg.Go(func() {
		if err := srv.Serve(lis); err != nil {
			d.logger.Error(err, "gRPC server stopped", "endpoint", d.cfg.CSIAddonsEndpoint)
		}
	})
	d.logger.Info("Serving csi-addons", "endpoint", d.addons)
	return nil
}

// Stop stops every server, waits for them and closes the audit log. It is
// safe to call more than once.
func (d *Driver) Stop() {
	d.stopOnce.Do(func() {
		if d.stopCtx != nil {
			d.stopCtx()
		}
		for _, s := range d.servers {
			s.Stop()
		}
		if d.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := d.http.Shutdown(ctx); err != nil {
				d.logger.Error(err, "Stopping the metrics server")
			}
			cancel()
		}
		d.wg.Wait()
		for _, p := range d.sockPaths {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				d.logger.Error(err, "Removing socket", "path", p)
			}
		}
		if err := d.audit.Close(); err != nil {
			d.logger.Error(err, "Closing the audit log")
		}
		stopBackend(d.tgt)
	})
}

// Tgt returns the tgt backend, or nil for the memory backend.
func (d *Driver) Tgt() *tgt.Backend { return d.tgt }

// startBackend starts the storage behind the array: nothing for the memory
// backend, a tgtd with its LUNs under the state directory for tgt.
func startBackend(ctx context.Context, cfg Config) (*tgt.Backend, array.Storage, error) {
	if cfg.Backend != BackendTgt {
		return nil, nil, nil
	}
	b, err := tgt.Start(ctx, tgt.Options{Dir: filepath.Join(cfg.StateDir, "tgt"), Method: tgt.FenceMethod(cfg.FenceMethod)})
	if err != nil {
		return nil, nil, fmt.Errorf("start the tgt backend: %w", err)
	}
	return b, b, nil
}

func stopBackend(b *tgt.Backend) {
	if b != nil {
		b.Stop()
	}
}

// AuditPath returns the audit log file (JSON lines, see package audit).
func (d *Driver) AuditPath() string { return d.audit.Path() }

// StatePath returns the state file.
func (d *Driver) StatePath() string { return filepath.Join(d.cfg.StateDir, StateFile) }

// Endpoint returns the controller endpoint as a dialable address
// ("unix:///..." or "host:port").
func (d *Driver) Endpoint() string { return d.addrs[""] }

// NodeEndpoint returns the dialable address of a node's socket: Endpoint
// for Config.NodeID, the node endpoint for the others, "" if not served.
func (d *Driver) NodeEndpoint(node string) string {
	if node != "" && node == d.cfg.NodeID {
		return d.addrs[""]
	}
	return d.addrs[node]
}

// CSIAddonsEndpoint returns the dialable address of the csi-addons socket
// ("unix:///..." or "host:port"), or "" when Config.CSIAddonsEndpoint is
// not set.
func (d *Driver) CSIAddonsEndpoint() string { return d.addons }

// MetricsAddress returns the host:port of the metrics server, or "".
func (d *Driver) MetricsAddress() string { return d.httpAddr }

// Array returns the array, for tests that inspect its state directly.
func (d *Driver) Array() *array.Array { return d.array }

// Faults returns the fault injector, for in-process tests.
func (d *Driver) Faults() *faults.Injector { return d.faults }

// listen opens the endpoint. A stale unix socket from an earlier run is
// removed first, as kubelet plugins do.
func (d *Driver) listen(endpoint string) (net.Listener, error) {
	network, addr, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, fmt.Errorf("create socket directory for %s: %w", endpoint, err)
		}
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
		}
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	if network == "unix" {
		d.sockPaths = append(d.sockPaths, addr)
	}
	return lis, nil
}

func (d *Driver) serveMetrics(m metrics.CSIMetricsManager) error {
	lis, err := net.Listen("tcp", d.cfg.HTTPEndpoint)
	if err != nil {
		return fmt.Errorf("listen on metrics endpoint %s: %w", d.cfg.HTTPEndpoint, err)
	}
	mux := http.NewServeMux()
	m.RegisterToServer(mux, "/metrics")
	d.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	d.httpAddr = lis.Addr().String()
	d.logger.Info("Serving metrics", "address", "http://"+d.httpAddr+"/metrics")
	d.wg.Go(func() {
		if err := d.http.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.logger.Error(err, "Metrics server stopped")
		}
	})
	return nil
}

// ParseEndpoint splits "unix:///path", "unix:path", "/path" or
// "tcp://host:port" into a network and an address.
func ParseEndpoint(ep string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(ep, "unix://"):
		network, addr = "unix", strings.TrimPrefix(ep, "unix://")
	case strings.HasPrefix(ep, "unix:"):
		network, addr = "unix", strings.TrimPrefix(ep, "unix:")
	case strings.HasPrefix(ep, "tcp://"):
		network, addr = "tcp", strings.TrimPrefix(ep, "tcp://")
	case strings.HasPrefix(ep, "/"):
		network, addr = "unix", ep
	default:
		return "", "", fmt.Errorf("endpoint %q: want unix:///path, /path or tcp://host:port", ep)
	}
	if addr == "" {
		return "", "", fmt.Errorf("endpoint %q has no address", ep)
	}
	return network, addr, nil
}

// endpointOf returns a gRPC dial target for a listener.
func endpointOf(lis net.Listener) string {
	if lis.Addr().Network() == "unix" {
		return "unix://" + lis.Addr().String()
	}
	return lis.Addr().String()
}

// unpublishMode is the mode Validate accepted, with "" made explicit.
func unpublishMode(m array.UnpublishMode) array.UnpublishMode {
	if m == "" {
		return array.UnpublishStrict
	}
	return m
}
