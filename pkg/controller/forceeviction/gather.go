package forceeviction

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/kube/view"
)

// Input is what force-eviction's decisions read about one node. The Lease
// is as the source gave it: the controller judges it by when it observed
// the renewal (Controller.observed), explain by its renewTime.
type Input struct {
	// Node is nil when the node does not exist.
	Node  *v1.Node
	Lease *coordinationv1.Lease
	Pods  []*v1.Pod
	VAs   []*storagev1.VolumeAttachment
}

// Gather reads the decisions' input for node from v: the caches for the
// sync, the API server for the write-time re-check, the snapshot for
// explain.
func Gather(ctx context.Context, v view.View, node string) (Input, error) {
	n, err := v.Node(ctx, node)
	if n == nil || err != nil {
		return Input{}, err
	}
	in := Input{Node: n}
	if in.Lease, err = v.NodeLease(ctx, node); err != nil {
		return Input{}, err
	}
	if in.Pods, err = v.PodsOnNode(ctx, node); err != nil {
		return Input{}, err
	}
	if in.VAs, err = v.VolumeAttachmentsOnNode(ctx, node); err != nil {
		return Input{}, err
	}
	return in, nil
}
