package server

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/array"
	"fenceline.io/fenceline/pkg/fence/fencev1"
)

// fenceStore serves the array's fences as the fence extension's
// ListFences and LiftFence (fence.FenceStore); package fence validates the
// requests and pages the answers. The array's Volume.Fenced is the only
// fence record, on both backends: the tgt backend carries a fence out on
// the target, and a lift changes nothing there (the initiator stays out of
// the ACL until a ControllerPublishVolume grants it again).
type fenceStore struct {
	sh *Shared
}

// Fences lists the array's fences, one per node and volume. The mock needs
// no secrets.
func (f fenceStore) Fences(_ context.Context, req *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	return wireFences(f.sh.Array.Fences(req.GetNodeId())), nil
}

// LiftFences lifts the node's fences in the array and logs why, as the
// contract asks of a lift.
func (f fenceStore) LiftFences(ctx context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	lifted, err := f.sh.Array.LiftFences(req.GetNodeId(), req.GetVolumeIds())
	if err != nil {
		return nil, err
	}
	vols := make([]string, 0, len(lifted))
	for _, r := range lifted {
		vols = append(vols, r.Volume)
	}
	klog.FromContext(ctx).Info("Lifted fences", "node", req.GetNodeId(), "volumes", vols, "reason", req.GetReason())
	return wireFences(lifted), nil
}

// wireFences turns the array's records into ListFences entries.
func wireFences(recs []array.FenceRecord) []*fencev1.Fence {
	out := make([]*fencev1.Fence, 0, len(recs))
	for _, r := range recs {
		out = append(out, &fencev1.Fence{
			NodeId:    r.Node,
			VolumeIds: []string{r.Volume},
			FencedAt:  timestamppb.New(r.Since),
			Details:   r.Details,
		})
	}
	return out
}
