// Package outofservice removes the KEP-2268 node.kubernetes.io/out-of-service
// taint once it is provably safe, so that a recovered node can run pods again
// without a human (opt-in with --remove-out-of-service-taint). Safe means:
// the node is Ready, it has rebooted since the taint was first seen while it
// was down (its boot ID changed), no pod is terminating on it and no
// VolumeAttachment is left for it.
package outofservice

import (
	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Decision is what to do with a node.
type Decision struct {
	// RecordBootID stores the node's current boot ID in
	// names.BootIDAnnotation.
	RecordBootID bool
	// ClearRecord removes names.BootIDAnnotation.
	ClearRecord bool
	// Untaint removes the out-of-service taint.
	Untaint bool
	Why     string
}

// Decide is the single place that states when the out-of-service taint is
// removed. terminating counts pods on the node with a deletion timestamp; vas
// counts the node's VolumeAttachments.
func Decide(node *v1.Node, terminating, vas int) Decision {
	if node == nil {
		return Decision{Why: "node does not exist"}
	}
	recorded, hasRecord := node.Annotations[names.BootIDAnnotation]
	current := node.Status.NodeInfo.BootID
	switch {
	case !nodeutil.HasTaint(node, names.OutOfServiceTaint):
		if hasRecord {
			return Decision{ClearRecord: true, Why: "out-of-service taint is gone; forgetting the recorded boot ID"}
		}
		return Decision{Why: "node has no out-of-service taint"}
	case !nodeutil.IsReady(node):
		if !hasRecord {
			return Decision{RecordBootID: true, Why: "out-of-service taint seen while the node is down; recording its boot ID"}
		}
		return Decision{Why: "node is not Ready"}
	case !hasRecord:
		return Decision{Why: "the taint was never seen while the node was down, so a reboot cannot be proven; a human must remove it"}
	case recorded == "" || current == "" || recorded == current:
		return Decision{Why: "node is Ready but its boot ID has not changed: no proven power cycle"}
	case terminating > 0:
		return Decision{Why: "pods are still terminating on the node"}
	case vas > 0:
		return Decision{Why: "VolumeAttachments remain for the node"}
	}
	return Decision{Untaint: true, ClearRecord: true, Why: "node rebooted (boot ID changed), is Ready, has no terminating pod and no VolumeAttachment"}
}
