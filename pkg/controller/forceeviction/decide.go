// Package forceeviction implements the ForceEviction proposal: an operator
// taints a NotReady node fenceline.io/force-eviction:NoExecute, and every pod
// on it that does not tolerate the taint is force-deleted (terminating or
// not). Once all are gone the node's volumesInUse and volumesAttached are
// cleared so that the attach/detach controller detaches at once, and once no
// VolumeAttachment is left the taint is removed. A node that is Ready again
// (before or during the eviction) stops the eviction and loses the taint.
package forceeviction

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// PodDecision says whether to force-delete a pod, and why (or why not).
type PodDecision struct {
	Delete bool
	Why    string
}

// DecidePod is the single place that states when force-eviction deletes a
// pod: the node exists, carries the force-eviction taint and is not Ready,
// and the pod does not tolerate the taint and was not already force-deleted.
// Mirror pods and DaemonSet pods are deleted like any other pod (as
// upstream's pod GC does): their kubelet is gone, and a DaemonSet pod that
// should stay tolerates the taint.
func DecidePod(node *v1.Node, pod *v1.Pod) PodDecision {
	switch {
	case pod == nil:
		return PodDecision{Why: "pod is gone"}
	case node == nil:
		return PodDecision{Why: "node does not exist"}
	case pod.Spec.NodeName != node.Name:
		return PodDecision{Why: "pod is not bound to this node"}
	}
	taint := nodeutil.FindTaint(node, names.ForceEvictionTaint)
	switch {
	case taint == nil:
		return PodDecision{Why: "node has no force-eviction taint"}
	case nodeutil.IsReady(node):
		return PodDecision{Why: "node is Ready"}
	case podutil.ToleratesTaint(pod, taint):
		return PodDecision{Why: "pod tolerates the force-eviction taint"}
	case podutil.IsForceDeleted(pod):
		return PodDecision{Why: "pod was already force-deleted and waits for its finalizers"}
	}
	return PodDecision{Delete: true, Why: fmt.Sprintf("fenceline: node %s tainted %s and not Ready", node.Name, names.ForceEvictionTaint)}
}

// NodeDecision is what to do with the node itself.
type NodeDecision struct {
	// ReleaseVolumes clears node.status.volumesInUse and volumesAttached.
	ReleaseVolumes bool
	// Untaint removes the force-eviction taint.
	Untaint bool
	Why     string
	// After is set when the decision may change by itself after that long.
	After time.Duration
}

// DecideNode is the single place that states when force-eviction releases
// a node's volumes and removes its taint. remaining counts the pods still on
// the node that do not tolerate the taint (force-deleted pods held by
// finalizers included); vas counts the node's VolumeAttachments; taintSince
// is when the taint was first seen; readyGrace is how long a node that is
// still Ready may take to be noticed dead (the node-monitor grace period).
//
//   - Ready node that went NotReady and came back after the taint appeared:
//     the kubelet is back, before or during the eviction. Stop and remove
//     the taint; a live kubelet owns its pods and volumes again.
//   - Ready node that has stayed Ready since before the taint: an operator
//     may taint a node that just died, before the node controller notices.
//     Wait up to readyGrace for it to turn NotReady; if it stays Ready, its
//     kubelet is alive: remove the taint.
//   - NotReady, pods remain: evicting, nothing to do to the node yet.
//   - NotReady, no pod left: clear the volume lists so the attach/detach
//     controller detaches at once; keep the taint while VolumeAttachments
//     remain, so an attacher that fences on the taint still sees it.
//   - NotReady, no pod and no VolumeAttachment left: remove the taint.
func DecideNode(node *v1.Node, remaining, vas int, taintSince, now time.Time, readyGrace time.Duration) NodeDecision {
	switch {
	case node == nil:
		return NodeDecision{Why: "node does not exist"}
	case !nodeutil.HasTaint(node, names.ForceEvictionTaint):
		return NodeDecision{Why: "node has no force-eviction taint"}
	case nodeutil.IsReady(node):
		// lastTransitionTime has one-second resolution: only a later
		// second proves the node came back after the taint.
		if c := nodeutil.ReadyCondition(node); c != nil && c.LastTransitionTime.Time.After(taintSince) {
			return NodeDecision{Untaint: true, Why: "node is Ready again; force eviction stopped"}
		}
		if waited := now.Sub(taintSince); waited < readyGrace {
			return NodeDecision{Why: fmt.Sprintf("node still Ready %s after the taint; waiting up to %s for it to be noticed dead", waited.Round(time.Second), readyGrace), After: readyGrace - waited}
		}
		return NodeDecision{Untaint: true, Why: fmt.Sprintf("node stayed Ready for %s after the taint: its kubelet is alive; nothing evicted", readyGrace)}
	case remaining > 0:
		return NodeDecision{Why: fmt.Sprintf("%d pod(s) still on the node", remaining)}
	}
	release := len(node.Status.VolumesInUse) > 0 || len(node.Status.VolumesAttached) > 0
	if vas > 0 || release {
		return NodeDecision{ReleaseVolumes: release, Why: fmt.Sprintf("all pods gone; waiting for %d VolumeAttachment(s) to be detached", vas)}
	}
	return NodeDecision{Untaint: true, Why: "force eviction complete: all pods gone and all volumes detached"}
}
