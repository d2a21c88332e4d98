package server

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"fenceline.io/fenceline/mock-driver/api/csiaddons/fence"
	"fenceline.io/fenceline/mock-driver/api/csiaddons/identity"
	"fenceline.io/fenceline/mock-driver/audit"
)

// NewCSIAddonsServer returns a gRPC server for the driver's csi-addons
// socket: the csi-addons Identity service and the FenceController
// service, which fences client networks on the array. It is a controller
// socket (CONTROLLER_SERVICE) and shares the interceptor of the CSI
// sockets, so its calls are logged (secrets redacted), subject to the
// fault rules by method name ("FenceClusterNetwork:Unavailable:1") and
// recorded in the audit log.
func NewCSIAddonsServer(sh *Shared, endpoint string) *grpc.Server {
	s := grpc.NewServer(grpc.UnaryInterceptor(sh.interceptor(Socket{Endpoint: endpoint})))
	identity.RegisterIdentityServer(s, &addonsIdentityServer{sh: sh})
	fence.RegisterFenceControllerServer(s, &fenceControllerServer{sh: sh})
	return s
}

type addonsIdentityServer struct {
	identity.UnimplementedIdentityServer
	sh *Shared
}

// GetIdentity names the driver as GetPluginInfo does.
func (s *addonsIdentityServer) GetIdentity(context.Context, *identity.GetIdentityRequest) (*identity.GetIdentityResponse, error) {
	return &identity.GetIdentityResponse{Name: s.sh.Name, VendorVersion: s.sh.Version}, nil
}

// GetCapabilities announces the controller service and network fencing,
// including GetFenceClients.
func (s *addonsIdentityServer) GetCapabilities(context.Context, *identity.GetCapabilitiesRequest) (*identity.GetCapabilitiesResponse, error) {
	return &identity.GetCapabilitiesResponse{Capabilities: []*identity.Capability{
		{Type: &identity.Capability_Service_{Service: &identity.Capability_Service{Type: identity.Capability_Service_CONTROLLER_SERVICE}}},
		{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: identity.Capability_NetworkFence_NETWORK_FENCE}}},
		{Type: &identity.Capability_NetworkFence_{NetworkFence: &identity.Capability_NetworkFence{Type: identity.Capability_NetworkFence_GET_CLIENTS_TO_FENCE}}},
	}}, nil
}

// Probe is always ready: the array is in-process.
func (s *addonsIdentityServer) Probe(context.Context, *identity.ProbeRequest) (*identity.ProbeResponse, error) {
	return &identity.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// fenceControllerServer serves network fencing from the array. The mock
// needs no secrets or parameters and ignores them (the audit log names the
// keys it got).
type fenceControllerServer struct {
	fence.UnimplementedFenceControllerServer
	sh *Shared
}

// FenceClusterNetwork fences the request's CIDR blocks; see
// array.FenceNetworks.
func (s *fenceControllerServer) FenceClusterNetwork(_ context.Context, req *fence.FenceClusterNetworkRequest) (*fence.FenceClusterNetworkResponse, error) {
	if err := s.sh.Array.FenceNetworks(cidrStrings(req.GetCidrs())); err != nil {
		return nil, err
	}
	return &fence.FenceClusterNetworkResponse{}, nil
}

// UnfenceClusterNetwork lifts the fences of exactly the request's blocks;
// see array.UnfenceNetworks.
func (s *fenceControllerServer) UnfenceClusterNetwork(_ context.Context, req *fence.UnfenceClusterNetworkRequest) (*fence.UnfenceClusterNetworkResponse, error) {
	if err := s.sh.Array.UnfenceNetworks(cidrStrings(req.GetCidrs())); err != nil {
		return nil, err
	}
	return &fence.UnfenceClusterNetworkResponse{}, nil
}

// ListClusterFence lists the fenced blocks.
func (s *fenceControllerServer) ListClusterFence(context.Context, *fence.ListClusterFenceRequest) (*fence.ListClusterFenceResponse, error) {
	resp := &fence.ListClusterFenceResponse{}
	for _, f := range s.sh.Array.NetworkFences() {
		resp.Cidrs = append(resp.Cidrs, &fence.CIDR{Cidr: f.CIDR.String()})
	}
	return resp, nil
}

// GetFenceClients lists the nodes whose plugins registered a client
// address with the array, each address as a single-host block (/32 or
// /128), by node ID. A node that registered none is not listed.
func (s *fenceControllerServer) GetFenceClients(context.Context, *fence.GetFenceClientsRequest) (*fence.GetFenceClientsResponse, error) {
	clients := s.sh.Array.Clients()
	resp := &fence.GetFenceClientsResponse{}
	for _, n := range slices.Sorted(maps.Keys(clients)) {
		c := &fence.ClientDetails{Id: n}
		for _, a := range clients[n] {
			c.Addresses = append(c.Addresses, &fence.CIDR{Cidr: netip.PrefixFrom(a, a.BitLen()).String()})
		}
		resp.Clients = append(resp.Clients, c)
	}
	return resp, nil
}

func cidrStrings(cidrs []*fence.CIDR) []string {
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		out = append(out, c.GetCidr())
	}
	return out
}

// redactAddonsSecrets returns the csi-addons request with its secrets'
// values replaced, for logging, or req itself when it has none. Every
// csi-addons request carries its credentials in a map field named secrets
// (the published protos mark it csi_secret, which these omit), so the
// field is found by name rather than per message type.
func redactAddonsSecrets(req any) any {
	m, ok := req.(proto.Message)
	if !ok {
		return req
	}
	fd := m.ProtoReflect().Descriptor().Fields().ByName("secrets")
	if fd == nil || !fd.IsMap() || m.ProtoReflect().Get(fd).Map().Len() == 0 {
		return req
	}
	c := proto.Clone(m)
	secrets := c.ProtoReflect().Mutable(fd).Map()
	var keys []protoreflect.MapKey
	secrets.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	for _, k := range keys {
		secrets.Set(k, protoreflect.ValueOfString("***stripped***"))
	}
	return c
}

// addonsRecord fills in the audit record of a fence or unfence call: the
// blocks asked for, and the names (never the values) of the secrets and
// parameters that came with them.
func addonsRecord(rec *audit.Record, req any) {
	var cidrs []*fence.CIDR
	var secrets, params map[string]string
	switch r := req.(type) {
	case *fence.FenceClusterNetworkRequest:
		cidrs, secrets, params = r.GetCidrs(), r.GetSecrets(), r.GetParameters()
	case *fence.UnfenceClusterNetworkRequest:
		cidrs, secrets, params = r.GetCidrs(), r.GetSecrets(), r.GetParameters()
	default:
		return
	}
	note := "cidrs=" + strings.Join(cidrStrings(cidrs), ",")
	if len(secrets) > 0 {
		note += " secrets=" + strings.Join(slices.Sorted(maps.Keys(secrets)), ",")
	}
	if len(params) > 0 {
		note += " parameters=" + strings.Join(slices.Sorted(maps.Keys(params)), ",")
	}
	if rec.Message != "" {
		rec.Message = fmt.Sprintf("%s; %s", rec.Message, note)
		return
	}
	rec.Message = note
}
