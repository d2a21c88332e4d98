package outofservice

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/kube/view"
)

// Input is what Decide reads about one node.
type Input struct {
	// Node is nil when the node does not exist.
	Node *v1.Node
	// Terminating counts the node's pods with a deletion timestamp.
	Terminating int
	// VolumeAttachments counts the node's VolumeAttachments.
	VolumeAttachments int
}

// Decide is Decide on the gathered input.
func (in Input) Decide() Decision { return Decide(in.Node, in.Terminating, in.VolumeAttachments) }

// Gather reads Decide's input for node from v: the caches for the sync,
// the API server for the write-time re-check, the snapshot for explain.
func Gather(ctx context.Context, v view.View, node string) (Input, error) {
	o, err := view.Read(ctx, v, node, view.Parts{Pods: true, VolumeAttachments: true})
	if o.Node == nil || err != nil {
		return Input{}, err
	}
	in := Input{Node: o.Node, VolumeAttachments: len(o.VolumeAttachments)}
	for _, p := range o.Pods {
		if podutil.IsTerminating(p) {
			in.Terminating++
		}
	}
	return in, nil
}
