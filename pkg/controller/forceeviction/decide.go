// Package forceeviction implements the ForceEviction proposal: an operator
// taints a NotReady node fenceline.io/force-eviction:NoExecute, and once the
// kubelet shows no sign of life (not Ready, and its node Lease not renewed
// for the grace period) every pod on it that does not tolerate the taint is
// force-deleted (terminating or not). Once all are gone the node's
// volumesInUse and volumesAttached are cleared so that the attach/detach
// controller detaches at once, and once no VolumeAttachment is left the
// taint is removed. A kubelet that comes back before the eviction started
// stops it and the taint is removed; one that comes back mid-eviction stops
// it too, but the taint stays until the evicted pods' volumes are detached.
package forceeviction

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Liveness says whether the kubelet shows a sign of life: the node is Ready,
// or its Lease (kube-node-lease/<node>) was renewed less than grace ago. A
// kubelet that posts NotReady itself (its runtime is down, say) still renews
// its Lease: it is alive and may be running containers. A missing Lease is
// no evidence of life. After is how long until a fresh Lease goes stale.
type Liveness struct {
	Alive bool
	Why   string
	After time.Duration
}

// KubeletLiveness is the single place that states when the kubelet counts as
// alive for force eviction (scenario 1 and 2 of the proposal: "no new
// heartbeat from the kubelet").
func KubeletLiveness(node *v1.Node, lease *coordinationv1.Lease, now time.Time, grace time.Duration) Liveness {
	if nodeutil.IsReady(node) {
		return Liveness{Alive: true, Why: "node is Ready"}
	}
	if lease == nil || lease.Spec.RenewTime == nil {
		return Liveness{Why: "no node Lease found: no evidence that the kubelet is alive"}
	}
	since := now.Sub(lease.Spec.RenewTime.Time)
	if since < grace {
		return Liveness{Alive: true, After: grace - since,
			Why: fmt.Sprintf("the kubelet renewed its node Lease %s ago (within %s): it is alive", since.Round(time.Second), grace)}
	}
	return Liveness{Why: fmt.Sprintf("node Lease not renewed for %s", since.Round(time.Second))}
}

// evictionTaint returns the node's force-eviction taint with its effect
// (NoExecute), or nil: a taint with the key and another effect is not a
// request for force eviction.
func evictionTaint(node *v1.Node) *v1.Taint {
	if node == nil {
		return nil
	}
	for i := range node.Spec.Taints {
		if t := &node.Spec.Taints[i]; t.Key == names.ForceEvictionTaint && t.Effect == v1.TaintEffectNoExecute {
			return t
		}
	}
	return nil
}

// PodDecision says whether to force-delete a pod, and why (or why not).
type PodDecision struct {
	Delete bool
	Why    string
}

// DecidePod is the single place that states when force-eviction deletes a
// pod: the node exists, carries the force-eviction taint with effect
// NoExecute, and its kubelet shows no sign of life (KubeletLiveness: not
// Ready and Lease not renewed for grace); the pod does not tolerate the
// taint and was not already force-deleted. Mirror pods and DaemonSet pods
// are deleted like any other pod (as upstream's pod GC does): their kubelet
// is gone, and a DaemonSet pod that should stay tolerates the taint.
func DecidePod(node *v1.Node, pod *v1.Pod, lease *coordinationv1.Lease, now time.Time, grace time.Duration) PodDecision {
	switch {
	case pod == nil:
		return PodDecision{Why: "pod is gone"}
	case node == nil:
		return PodDecision{Why: "node does not exist"}
	case pod.Spec.NodeName != node.Name:
		return PodDecision{Why: "pod is not bound to this node"}
	}
	taint := evictionTaint(node)
	if taint == nil {
		return PodDecision{Why: "node has no force-eviction taint with effect NoExecute"}
	}
	live := KubeletLiveness(node, lease, now, grace)
	switch {
	case live.Alive:
		return PodDecision{Why: live.Why}
	case podutil.ToleratesTaint(pod, taint):
		return PodDecision{Why: "pod tolerates the force-eviction taint"}
	case podutil.IsForceDeleted(pod):
		return PodDecision{Why: "pod was already force-deleted and waits for its finalizers"}
	}
	return PodDecision{Delete: true, Why: fmt.Sprintf("fenceline: node %s tainted %s, not Ready, %s", node.Name, names.ForceEvictionTaint, live.Why)}
}

// NodeState is what DecideNode looks at.
type NodeState struct {
	Node  *v1.Node
	Lease *coordinationv1.Lease
	// Remaining counts the pods still on the node that do not tolerate
	// the taint (force-deleted pods held by finalizers included).
	Remaining int
	// VAs counts the node's VolumeAttachments.
	VAs int
	// Evicted says the eviction started: the node carries the record of
	// the evicted pods' volumes (EvictedVolumesAnnotation).
	Evicted bool
	// EvictedVAs counts the node's VolumeAttachments of recorded volumes.
	EvictedVAs int
	// TaintSince is when the taint was first seen.
	TaintSince time.Time
}

// NodeDecision is what to do with the node itself.
type NodeDecision struct {
	// ReleaseVolumes clears node.status.volumesInUse and volumesAttached.
	ReleaseVolumes bool
	// Untaint removes the force-eviction taint.
	Untaint bool
	// ClearRecord removes EvictedVolumesAnnotation.
	ClearRecord bool
	Why         string
	// After is set when the decision may change by itself after that long.
	After time.Duration
}

// DecideNode is the single place that states when force-eviction releases
// a node's volumes and removes its taint (the proposal's scenarios 1-3).
// readyGrace is how long a node that is still Ready may take to be noticed
// dead, and how recent a Lease renewal proves a live kubelet.
//
//   - Kubelet alive after the eviction started (scenario 1): stop evicting,
//     keep the taint until no VolumeAttachment of an evicted pod's volume
//     remains (an attacher that fences on the taint must still see it
//     during those detaches), then remove it.
//   - Kubelet alive before the eviction started (scenario 3): a node whose
//     Ready condition turned True after the taint came back: remove the
//     taint. A node that has stayed Ready since before the taint may just
//     have died unnoticed: wait up to readyGrace, then remove the taint. A
//     NotReady node whose kubelet renews its Lease: wait.
//   - No sign of life, pods remain: evicting, nothing to do to the node.
//   - No sign of life, no pod left: clear the volume lists so the
//     attach/detach controller detaches at once; keep the taint while
//     VolumeAttachments remain, then remove it.
func DecideNode(s NodeState, now time.Time, readyGrace time.Duration) NodeDecision {
	node := s.Node
	switch {
	case node == nil:
		return NodeDecision{Why: "node does not exist"}
	case !cutoff.HasForceEvictionTaint(node):
		if s.Evicted {
			return NodeDecision{ClearRecord: true, Why: "force-eviction taint is gone; forgetting the evicted volumes"}
		}
		return NodeDecision{Why: "node has no force-eviction taint with effect NoExecute"}
	}
	live := KubeletLiveness(node, s.Lease, now, readyGrace)
	switch {
	case live.Alive && s.Evicted && s.EvictedVAs > 0:
		return NodeDecision{Why: fmt.Sprintf("%s: eviction stopped; keeping the taint until %d VolumeAttachment(s) of evicted pods are detached", live.Why, s.EvictedVAs)}
	case live.Alive && s.Evicted:
		return NodeDecision{Untaint: true, ClearRecord: true, Why: live.Why + ": eviction stopped and no VolumeAttachment of an evicted pod remains"}
	case live.Alive:
		return decideAliveBeforeEviction(node, live, s.TaintSince, now, readyGrace)
	case s.Remaining > 0:
		return NodeDecision{Why: fmt.Sprintf("%d pod(s) still on the node", s.Remaining)}
	}
	release := len(node.Status.VolumesInUse) > 0 || len(node.Status.VolumesAttached) > 0
	if s.VAs > 0 || release {
		return NodeDecision{ReleaseVolumes: release, Why: fmt.Sprintf("all pods gone; waiting for %d VolumeAttachment(s) to be detached", s.VAs)}
	}
	return NodeDecision{Untaint: true, ClearRecord: s.Evicted, Why: "force eviction complete: all pods gone and all volumes detached"}
}

// decideAliveBeforeEviction is DecideNode for a live kubelet and nothing
// evicted yet.
func decideAliveBeforeEviction(node *v1.Node, live Liveness, taintSince, now time.Time, readyGrace time.Duration) NodeDecision {
	if !nodeutil.IsReady(node) {
		return NodeDecision{Why: live.Why + "; not evicting", After: live.After}
	}
	// lastTransitionTime has one-second resolution: only a later second
	// proves the node came back after the taint.
	if c := nodeutil.ReadyCondition(node); c != nil && c.LastTransitionTime.Time.After(taintSince) {
		return NodeDecision{Untaint: true, Why: "node is Ready again before anything was evicted; force eviction stopped"}
	}
	if waited := now.Sub(taintSince); waited < readyGrace {
		return NodeDecision{Why: fmt.Sprintf("node still Ready %s after the taint; waiting up to %s for it to be noticed dead", waited.Round(time.Second), readyGrace), After: readyGrace - waited}
	}
	return NodeDecision{Untaint: true, Why: fmt.Sprintf("node stayed Ready for %s after the taint: its kubelet is alive; nothing evicted", readyGrace)}
}
