package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

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

func (s *arrayServer) SetFaults(_ context.Context, req *mockv1.SetFaultsRequest) (*mockv1.SetFaultsResponse, error) {
	rules := make([]faults.Fault, 0, len(req.GetFaults()))
	for i, f := range req.GetFaults() {
		r, err := FaultFromProto(f)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "faults[%d]: %v", i, err)
		}
		rules = append(rules, r)
	}
	s.sh.Faults.Set(rules)
	return &mockv1.SetFaultsResponse{}, nil
}

func (s *arrayServer) ListFaults(context.Context, *mockv1.ListFaultsRequest) (*mockv1.ListFaultsResponse, error) {
	resp := &mockv1.ListFaultsResponse{}
	for _, f := range s.sh.Faults.List() {
		resp.Faults = append(resp.Faults, FaultToProto(f))
	}
	return resp, nil
}

// FaultFromProto converts a wire rule, checking it.
func FaultFromProto(f *mockv1.Fault) (faults.Fault, error) {
	if f.GetMethod() == "" {
		return faults.Fault{}, fmt.Errorf("method is required")
	}
	out := faults.Fault{Method: f.GetMethod(), Count: int(f.GetCount())}
	if c := f.GetCode(); c != "" {
		code, err := faults.ParseCode(c)
		if err != nil {
			return faults.Fault{}, err
		}
		out.Code = code
	}
	if f.GetLatency() != nil {
		if err := f.GetLatency().CheckValid(); err != nil {
			return faults.Fault{}, fmt.Errorf("latency: %w", err)
		}
		out.Latency = f.GetLatency().AsDuration()
	}
	if out.Code == codes.OK && out.Latency <= 0 {
		return faults.Fault{}, fmt.Errorf("rule for %s injects neither an error nor latency", out.Method)
	}
	return out, nil
}

// FaultToProto converts a rule to its wire form.
func FaultToProto(f faults.Fault) *mockv1.Fault {
	out := &mockv1.Fault{Method: f.Method, Count: int32(f.Count)}
	if f.Code != codes.OK {
		out.Code = f.Code.String()
	}
	if f.Latency > 0 {
		out.Latency = durationpb.New(f.Latency)
	}
	return out
}
