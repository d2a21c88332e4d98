package podgc

import (
	"context"

	"fenceline.io/fenceline/pkg/kube/view"
)

// Gather reads what podgc decides on about node (the node, its pods and
// its VolumeAttachments, which get the fence intent) from v: the caches for
// the sync, the snapshot for explain. Each deletion is re-decided by the
// actuator on the pod and node read fresh (Recheck).
func Gather(ctx context.Context, v view.View, node string) (view.Objects, error) {
	return view.Read(ctx, v, node, view.Parts{Pods: true, VolumeAttachments: true})
}
