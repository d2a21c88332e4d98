// Package explain is what a controller of fenceline-controller tells
// `kubectl fenceline explain`: its verdicts on a node and the node's
// objects, decided by its own decision functions on the input its own
// gather read, from the plugin's view of the cluster. Each controller's
// hook is in its Descriptor (pkg/controller/app), so that the plugin loops
// over the table and imports no controller.
package explain

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/kube/view"
)

// Verdict is one controller's decision about the node or one of its
// objects, and its -o json|yaml form.
type Verdict struct {
	// Controller is the controller (fenceline-controller's name for it,
	// with a note such as "(alpha)") or "attacher".
	Controller string `json:"controller"`
	// Object is what the decision is about: node/<name>, pod/<ns>/<name>,
	// volumeattachment/<name>.
	Object   string `json:"object"`
	Decision string `json:"decision"`
	Why      string `json:"why"`
}

// Input is what a hook reads: the plugin's view and what its snapshot
// holds besides.
type Input struct {
	Ctx context.Context
	// View reads the node and its objects; Fencing the fencing API's
	// objects, nil when the API is not installed.
	View    view.View
	Fencing view.Fencing
	// NetworkFences reads csi-addons NetworkFences; nil when the caller
	// cannot (they are then taken as not served).
	NetworkFences networkfence.Reader
	// Node is the node explained; Pods are its pods.
	Node *v1.Node
	Pods []*v1.Pod
	// Resolver classifies pod volumes as the controllers' informers do.
	Resolver *podvolumes.Resolver
	// Heartbeats are the attachers' heartbeat Leases and Drivers the
	// CSIDrivers, for the evidence about attachers.
	Heartbeats []*coordinationv1.Lease
	Drivers    []*storagev1.CSIDriver
	Now        time.Time
	// Settings are the controller's own settings as the plugin's flags
	// set them (its Descriptor's type), nil for none.
	Settings any
}

// NodeRef names a node as Verdict.Object does.
func NodeRef(n *v1.Node) string { return "node/" + n.Name }

// PodRef names a pod as Verdict.Object does.
func PodRef(p *v1.Pod) string { return "pod/" + p.Namespace + "/" + p.Name }

// DeleteOrLeave is the decision word of a force deletion.
func DeleteOrLeave(del bool) string {
	if del {
		return "force-delete"
	}
	return "leave"
}
