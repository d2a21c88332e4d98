package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
	"fenceline.io/fenceline/mock-driver/faults"
)

// arrayServer is the mock's own service: data-plane writes acting as the
// socket's node, and runtime control of fault injection.
type arrayServer struct {
	mockv1.UnimplementedArrayServer
	sh   *Shared
	node string
}

// Write is a data-plane write acting as the socket's node; the array
// decides whether that node still has access.
func (s *arrayServer) Write(_ context.Context, req *mockv1.WriteRequest) (*mockv1.WriteResponse, error) {
	if err := required("volume_id", req.GetVolumeId()); err != nil {
		return nil, err
	}
	if s.node == "" {
		return nil, status.Error(codes.FailedPrecondition, "this socket serves no node; write through a node plugin's socket")
	}
	if err := s.sh.Array.Write(s.node, req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &mockv1.WriteResponse{NodeId: s.node, BytesWritten: uint64(len(req.GetData()))}, nil
}

// SetFaults replaces every fault rule of the driver.
func (s *arrayServer) SetFaults(_ context.Context, req *mockv1.SetFaultsRequest) (*mockv1.SetFaultsResponse, error) {
	rules := make([]faults.Fault, 0, len(req.GetFaults()))
	for i, f := range req.GetFaults() {
		r, err := faults.FromProto(f)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "faults[%d]: %v", i, err)
		}
		rules = append(rules, r)
	}
	s.sh.Faults.Set(rules)
	return &mockv1.SetFaultsResponse{}, nil
}

// ListFaults returns the rules in force.
func (s *arrayServer) ListFaults(context.Context, *mockv1.ListFaultsRequest) (*mockv1.ListFaultsResponse, error) {
	resp := &mockv1.ListFaultsResponse{}
	for _, f := range s.sh.Faults.List() {
		resp.Faults = append(resp.Faults, faults.ToProto(f))
	}
	return resp, nil
}
