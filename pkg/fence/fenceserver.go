package fence

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// FenceStore is the part of a driver that reads and lifts the fences its
// storage holds. NewFenceServer serves it as ListFences and LiftFence and
// does the rest: capability checks, request validation, filtering and
// paging. Its errors must be gRPC status errors (UNAVAILABLE when the
// storage cannot be reached, for example); the server returns them as they
// are.
type FenceStore interface {
	// Fences returns every fence the storage enforces now, in any order.
	// req carries the secrets and the node_id filter; a store may ignore
	// the filter (the server applies it again) and ignores max_entries and
	// starting_token, which the server handles. It changes nothing.
	Fences(ctx context.Context, req *fencev1.ListFencesRequest) ([]*fencev1.Fence, error)
	// LiftFences lifts the fences of req.node_id (those on req.volume_ids
	// only, when set) and returns the fences it lifted, as Fences showed
	// them. req has been validated. It must be idempotent (nothing to lift
	// is success with no fence returned), must not return before the lift
	// is in effect, and must never give the node access back: that is a
	// later ControllerPublishVolume's job (see the proto's safety contract).
	// A node-wide fence cannot be lifted volume by volume: with volume_ids
	// set it answers FAILED_PRECONDITION and lifts nothing.
	LiftFences(ctx context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error)
}

// NewFenceServer returns the FenceCapabilities service of a driver that
// advertises caps and, for ListFences and LiftFence, reads and lifts the
// fences of store. A call caps does not advertise answers UNIMPLEMENTED
// without reaching store. It fails when caps advertises ListFences or
// LiftFence without a store, or LiftFence without ListFences, which the
// contract forbids.
func NewFenceServer(caps Capabilities, store FenceStore) (fencev1.FenceCapabilitiesServer, error) {
	if (caps.ListFences || caps.LiftFence) && store == nil {
		return nil, errors.New("fence server: ListFences or LiftFence advertised without a FenceStore")
	}
	if caps.LiftFence && !caps.ListFences {
		return nil, errors.New("fence server: LiftFence advertised without ListFences; a CO lifts what it was shown")
	}
	return &fenceServer{caps: caps, store: store}, nil
}

// RegisterFenceServer registers NewFenceServer(caps, store) on s, the gRPC
// server of the driver's CSI services, in place of
// RegisterCapabilitiesServer. It must be called before s.Serve.
func RegisterFenceServer(s grpc.ServiceRegistrar, caps Capabilities, store FenceStore) error {
	srv, err := NewFenceServer(caps, store)
	if err != nil {
		return err
	}
	fencev1.RegisterFenceCapabilitiesServer(s, srv)
	return nil
}

// fenceServer answers GetFenceCapabilities with a fixed set and serves the
// optional calls it advertises from a FenceStore.
type fenceServer struct {
	fencev1.UnimplementedFenceCapabilitiesServer
	caps  Capabilities
	store FenceStore
}

// GetFenceCapabilities implements fencev1.FenceCapabilitiesServer.
func (s *fenceServer) GetFenceCapabilities(context.Context, *fencev1.GetFenceCapabilitiesRequest) (*fencev1.GetFenceCapabilitiesResponse, error) {
	return &fencev1.GetFenceCapabilitiesResponse{Capabilities: s.caps.List()}, nil
}

// ListFences implements fencev1.FenceCapabilitiesServer.
func (s *fenceServer) ListFences(ctx context.Context, req *fencev1.ListFencesRequest) (*fencev1.ListFencesResponse, error) {
	if !s.caps.ListFences {
		return nil, status.Error(codes.Unimplemented, "this endpoint does not advertise LIST_FENCES")
	}
	if err := ValidateListFencesRequest(req); err != nil {
		return nil, err
	}
	all, err := s.store.Fences(ctx, req)
	if err != nil {
		return nil, err
	}
	return PageFences(req, all)
}

// LiftFence implements fencev1.FenceCapabilitiesServer.
func (s *fenceServer) LiftFence(ctx context.Context, req *fencev1.LiftFenceRequest) (*fencev1.LiftFenceResponse, error) {
	if !s.caps.LiftFence {
		return nil, status.Error(codes.Unimplemented, "this endpoint does not advertise LIFT_FENCE")
	}
	if err := ValidateLiftFenceRequest(req); err != nil {
		return nil, err
	}
	lifted, err := s.store.LiftFences(ctx, req)
	if err != nil {
		return nil, err
	}
	return &fencev1.LiftFenceResponse{Lifted: lifted}, nil
}

// redacted replaces each secret value in a redacted copy of a request.
const redacted = "***stripped***"

// RedactSecrets returns req for a log line: a ListFencesRequest or
// LiftFenceRequest comes back as a copy whose secret values read
// "***stripped***", anything else as it is; req itself is never changed.
// csi-lib-utils' protosanitizer strips only the fields the official CSI
// messages mark as secret, so it would log these in clear.
func RedactSecrets(req any) any {
	switch r := req.(type) {
	case *fencev1.ListFencesRequest:
		if len(r.GetSecrets()) > 0 {
			c := proto.Clone(r).(*fencev1.ListFencesRequest)
			c.Secrets = redactMap(c.Secrets)
			return c
		}
	case *fencev1.LiftFenceRequest:
		if len(r.GetSecrets()) > 0 {
			c := proto.Clone(r).(*fencev1.LiftFenceRequest)
			c.Secrets = redactMap(c.Secrets)
			return c
		}
	}
	return req
}

func redactMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = redacted
	}
	return out
}
