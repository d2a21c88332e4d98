// Package server holds the mock driver's gRPC services: CSI Identity,
// Controller and Node, the fence extension's capability service, and the
// mock's own Array service (data plane and fault control); and, on a socket
// of its own, the csi-addons Identity and FenceController services
// (csiaddons.go). One Server value
// is one socket; every socket of a driver shares one array, one audit log
// and one fault injector.
package server

import (
	"fmt"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/fence"
)

// Shared is what every socket of one driver process shares.
type Shared struct {
	// Name is the CSI driver name.
	Name string
	// Version is reported by GetPluginInfo.
	Version string
	// Array is the storage array.
	Array *array.Array
	// Faults injects errors and latency.
	Faults *faults.Injector
	// Audit records every call.
	Audit *audit.Log
	// Metrics records per-RPC latency and result; nil disables metrics.
	Metrics metrics.CSIMetricsManager
	// Logger is the base logger.
	Logger logr.Logger
	// ListFences and LiftFence advertise and serve the fence extension's
	// calls of those names on the controller socket; LiftFence needs
	// ListFences.
	ListFences, LiftFence bool

	// order serialises the handling of every call across all sockets, so
	// that the audit log order is exactly the order in which the array
	// applied the calls. A mock array does not need more throughput.
	order sync.Mutex
}

// Socket describes what one endpoint serves.
type Socket struct {
	// Endpoint is the address, for logs.
	Endpoint string
	// NodeID is the node identity of the socket: node calls and writes
	// arriving here act as this node. Empty serves no Node service.
	NodeID string
	// Controller serves the Controller service on this socket.
	Controller bool
}

// NewGRPCServer returns a gRPC server with every service the socket offers
// registered and the logging, fault, audit and metrics interceptor
// installed. The controller socket lists and lifts fences when sh says so;
// node sockets never do, since the fences are the controller's.
func NewGRPCServer(sh *Shared, sock Socket) (*grpc.Server, error) {
	s := grpc.NewServer(grpc.UnaryInterceptor(sh.interceptor(sock)))
	sem := sh.Array.Semantics()
	csi.RegisterIdentityServer(s, &identityServer{sh: sh})
	caps := fence.Capabilities{}
	if sock.Controller {
		csi.RegisterControllerServer(s, &controllerServer{sh: sh})
		caps.UnpublishFence = sem.Fence || sem.FakeFence
		caps.ListFences, caps.LiftFence = sh.ListFences, sh.LiftFence
	}
	if sock.NodeID != "" {
		csi.RegisterNodeServer(s, &nodeServer{sh: sh, node: sock.NodeID})
		caps.ForceUnpublish = sem.ForceUnpublish
	}
	if err := fence.RegisterFenceServer(s, caps, fenceStore{sh: sh}); err != nil {
		return nil, fmt.Errorf("socket %s: %w", sock.Endpoint, err)
	}
	mockv1.RegisterArrayServer(s, &arrayServer{sh: sh, node: sock.NodeID})
	return s, nil
}
