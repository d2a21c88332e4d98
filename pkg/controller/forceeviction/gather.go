package forceeviction

import (
	"context"

	"fenceline.io/fenceline/pkg/kube/view"
)

// Gather reads what force-eviction's decisions read about node (the node,
// its Lease, pods and VolumeAttachments) from v: the caches for the sync,
// the API server for the write-time re-check, the snapshot for explain.
// The Lease is as the source gave it: the controller judges it by when it
// observed the renewal (Controller.observed), explain by its renewTime.
func Gather(ctx context.Context, v view.View, node string) (view.Objects, error) {
	return view.Read(ctx, v, node, view.Parts{Lease: true, Pods: true, VolumeAttachments: true})
}
