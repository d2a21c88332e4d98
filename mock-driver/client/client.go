// Package client is the Go helper for the mock driver's own Array service:
// data-plane writes and runtime fault injection. Errors are the gRPC status
// errors of the driver, so tests can check status.Code(err).
package client

import (
	"context"

	"google.golang.org/grpc"

	mockv1 "fenceline.io/fenceline/mock-driver/api/mock/v1"
	"fenceline.io/fenceline/mock-driver/faults"
)

// Write writes data to a volume as the node whose socket conn is connected
// to. It returns codes.PermissionDenied once the volume was fenced off that
// node or while the node's client address lies in a fenced network (a
// csi-addons network fence), codes.FailedPrecondition when the volume is not attached to or used
// by the node, codes.NotFound for an unknown volume.
func Write(ctx context.Context, conn grpc.ClientConnInterface, volumeID string, data []byte) error {
	_, err := mockv1.NewArrayClient(conn).Write(ctx, &mockv1.WriteRequest{VolumeId: volumeID, Data: data})
	return err
}

// SetFaults replaces every fault-injection rule of the driver behind conn
// (any of its sockets).
func SetFaults(ctx context.Context, conn grpc.ClientConnInterface, rules ...faults.Fault) error {
	req := &mockv1.SetFaultsRequest{}
	for _, r := range rules {
		req.Faults = append(req.Faults, faults.ToProto(r))
	}
	_, err := mockv1.NewArrayClient(conn).SetFaults(ctx, req)
	return err
}

// ClearFaults removes every fault-injection rule.
func ClearFaults(ctx context.Context, conn grpc.ClientConnInterface) error {
	return SetFaults(ctx, conn)
}

// ListFaults returns the rules in force, with the failures left in Count.
func ListFaults(ctx context.Context, conn grpc.ClientConnInterface) ([]faults.Fault, error) {
	resp, err := mockv1.NewArrayClient(conn).ListFaults(ctx, &mockv1.ListFaultsRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]faults.Fault, 0, len(resp.GetFaults()))
	for _, f := range resp.GetFaults() {
		r, err := faults.FromProto(f)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
