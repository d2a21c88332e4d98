package quarantine

import (
	"context"

	"fenceline.io/fenceline/pkg/kube/view"
)

// Gather reads what quarantine decides on about node (the node, its pods,
// its VolumeAttachments) from v: the caches for the sync, the API server
// for the re-check of the lift, the snapshot for explain. Each pod's
// volumes are classified by the caller's podvolumes.Resolver, and the
// attachers' evidence comes from the caller's source.
func Gather(ctx context.Context, v view.View, node string) (view.Objects, error) {
	return view.Read(ctx, v, node, view.Parts{Pods: true, VolumeAttachments: true})
}
