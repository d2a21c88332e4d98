// Package nodegone detaches the volumes left attached to a node whose Node
// object was deleted (kubernetes-csi/external-attacher#215). The
// attach/detach controller forgets a deleted node but not what it had
// attached there: the VolumeAttachment stays, and a replacement pod on
// another node waits for the volume until the attach/detach controller's
// 6-minute unmount wait runs out and it detaches blind. A deleted Node
// proves nothing about the machine, which may still be writing, so this
// controller starts the detach only where fenceline-attacher will fence it
// (a node that is gone is a reason to fence, see cutoff.ReasonNodeGone),
// and only once no pod is bound to the node any more.
package nodegone

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// Input is what Decide looks at for one VolumeAttachment.
type Input struct {
	// VA is the VolumeAttachment; nil when it is gone.
	VA *storagev1.VolumeAttachment
	// Node is the VolumeAttachment's Node; nil when it does not exist.
	Node *v1.Node
	// Pods are the pods bound to the VolumeAttachment's node name.
	Pods []*v1.Pod
	// AttacherFences says whether a fence-capable fenceline-attacher
	// serves the VolumeAttachment's driver (attacherevidence); Missing
	// says what is missing when it does not.
	AttacherFences bool
	Missing        string
}

// Decision says whether to delete the VolumeAttachment (which makes the
// attacher detach it, fenced), and why (or why not). Warn marks a volume
// left attached for want of a fence, which the operator should hear of.
type Decision struct {
	Detach bool
	Warn   bool
	Why    string
}

// Decide is the single place that states when node-gone starts a detach.
// It runs on cached data for the sync and again on data read fresh right
// before the delete.
//
// Invariants:
//   - a VolumeAttachment whose Node exists is never touched: the
//     attach/detach controller owns it;
//   - nothing is detached while any pod is still bound to the deleted
//     node: its containers may still run there (pod garbage collection
//     removes such pods, and this controller goes on once it has);
//   - nothing is detached unless a fence-capable fenceline-attacher serves
//     the driver: the detach must be fenced, since nobody knows whether
//     the machine still writes. Without one the volume stays attached and
//     the decision warns: upstream's blind detach after 6 minutes is what
//     remains.
func Decide(in Input) Decision {
	va := in.VA
	switch {
	case va == nil:
		return Decision{Why: "VolumeAttachment is gone"}
	case va.DeletionTimestamp != nil:
		return Decision{Why: "VolumeAttachment is already being detached"}
	case in.Node != nil:
		return Decision{Why: fmt.Sprintf("node %s exists: the attach/detach controller decides", in.Node.Name)}
	case len(in.Pods) > 0:
		return Decision{Why: fmt.Sprintf("node %s was deleted but %d pods are still bound to it (first: %s/%s); their containers may still run, and pod garbage collection removes them first", va.Spec.NodeName, len(in.Pods), in.Pods[0].Namespace, in.Pods[0].Name)}
	case !in.AttacherFences:
		missing := in.Missing
		if missing == "" {
			missing = "no heartbeat"
		}
		return Decision{Warn: true, Why: fmt.Sprintf("node %s was deleted, but no fence-capable fenceline-attacher serves %s (%s): a plain detach could hand the volume to another node while the machine still writes, so it stays attached (the attach/detach controller detaches it after its 6-minute wait)", va.Spec.NodeName, va.Spec.Attacher, missing)}
	}
	return Decision{Detach: true, Why: fmt.Sprintf("fenceline: node %s was deleted and no pod is bound to it any more; detaching with fence=true, as a deleted Node proves nothing about the machine", va.Spec.NodeName)}
}
