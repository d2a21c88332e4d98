// Package podgc is the event-driven KEP-2268 pod GC: it force-deletes pods
// stuck terminating on a node that is not Ready and carries the
// node.kubernetes.io/out-of-service taint. It applies the same rule as
// kube-controller-manager's gcTerminating, but reacts to each event instead
// of running every 20 seconds.
package podgc

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Decision says whether to force-delete a pod, and why (or why not).
type Decision struct {
	Delete bool
	Why    string
}

// Decide is the single place that states when podgc force-deletes a pod.
// Like upstream's gcTerminating it looks at the taint key only (any value,
// any effect) and deletes mirror pods and DaemonSet pods too: the static
// pod's kubelet is dead, and the DaemonSet controller recreates its pod only
// once the old one is gone.
//
// A node whose FencingComplete condition is True counts as down even while
// its Ready condition still says True from before the fence: node-fencing
// sets it only after the node's power was read back Off, which is proof
// the kubelet is gone, and kube-controller-manager marks a dead node
// NotReady only after its node-monitor grace period (50 s by default). A
// Ready condition that turned True after the fence is a node that came
// back (FencingComplete stays True while the request is Recovering, for as
// long as a manual unfence takes): its kubelet is alive, and its pods may
// be of the new boot, so they are not force-deleted.
func Decide(node *v1.Node, pod *v1.Pod) Decision {
	switch {
	case pod == nil:
		return Decision{Why: "pod is gone"}
	case node == nil:
		return Decision{Why: "node does not exist; orphaned pods are upstream pod GC's job"}
	case pod.Spec.NodeName != node.Name:
		return Decision{Why: "pod is not bound to this node"}
	case !cutoff.NodeDown(node):
		return Decision{Why: "node is Ready"}
	case !nodeutil.HasTaint(node, names.OutOfServiceTaint):
		return Decision{Why: "node has no out-of-service taint"}
	case !podutil.IsTerminating(pod):
		return Decision{Why: "pod is not terminating"}
	case podutil.IsForceDeleted(pod):
		return Decision{Why: "pod was already force-deleted and waits for its finalizers"}
	}
	if nodeutil.IsReady(node) {
		return Decision{Delete: true, Why: fmt.Sprintf("fenceline: node %s out of service (taint %s) and fenced (%s=True: its power was read back Off)", node.Name, names.OutOfServiceTaint, names.FencingCompleteCondition)}
	}
	return Decision{Delete: true, Why: fmt.Sprintf("fenceline: node %s out of service (taint %s) and not Ready", node.Name, names.OutOfServiceTaint)}
}

// Recheck is Decide in the form the actuator runs again on fresh data at
// write time.
func Recheck(node *v1.Node, pod *v1.Pod) (bool, string) {
	d := Decide(node, pod)
	return d.Delete, d.Why
}
