package faults

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
)

// FromProto converts a rule from its wire form, checking it.
func FromProto(f *mockv1.Fault) (Fault, error) {
	if f.GetMethod() == "" {
		return Fault{}, fmt.Errorf("method is required")
	}
	if f.GetCount() < 0 {
		return Fault{}, fmt.Errorf("count must not be negative")
	}
	out := Fault{Method: f.GetMethod(), Count: int(f.GetCount())}
	if c := f.GetCode(); c != "" {
		code, err := ParseCode(c)
		if err != nil {
			return Fault{}, err
		}
		out.Code = code
	}
	if f.GetLatency() != nil {
		if err := f.GetLatency().CheckValid(); err != nil {
			return Fault{}, fmt.Errorf("latency: %w", err)
		}
		out.Latency = f.GetLatency().AsDuration()
	}
	if out.Code == codes.OK && out.Latency <= 0 {
		return Fault{}, fmt.Errorf("rule for %s injects neither an error nor latency", out.Method)
	}
	return out, nil
}

// ToProto converts a rule to its wire form.
func ToProto(f Fault) *mockv1.Fault {
	out := &mockv1.Fault{Method: f.Method, Count: int32(f.Count)}
	if f.Code != codes.OK {
		out.Code = f.Code.String()
	}
	if f.Latency > 0 {
		out.Latency = durationpb.New(f.Latency)
	}
	return out
}
