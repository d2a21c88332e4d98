// Package outofservice removes the KEP-2268 node.kubernetes.io/out-of-service
// taint once it is provably safe, so that a recovered node can run pods again
// without a human (opt-in with --remove-out-of-service-taint). Safe means:
// the node is Ready, it has rebooted since the taint was first seen while it
// was down (its boot ID changed), no pod is terminating on it and no
// VolumeAttachment is left for it.
package outofservice

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Decision is what to do with a node.
type Decision struct {
	// RecordBootID stores the node's current boot ID in
	// names.BootIDAnnotation, tied to the taint's timeAdded (see Record).
	RecordBootID bool
	// ClearRecord removes names.BootIDAnnotation.
	ClearRecord bool
	// Untaint removes the out-of-service taint.
	Untaint bool
	Why     string
}

// Record is the value of names.BootIDAnnotation: the boot ID seen while the
// node was down, "@", and the timeAdded of the taint it was seen under. The
// time ties the proof to one out-of-service episode: a record left from an
// earlier taint (the controller was down when that taint went, or a human
// removed the taint and added a new one) does not match the new taint's
// timeAdded and counts as absent.
func Record(bootID string, taintAdded time.Time) string {
	return bootID + "@" + taintAdded.UTC().Format(time.RFC3339)
}

// EpisodeBootID returns the boot ID recorded for the node's current
// out-of-service taint. A record without a time, a taint without
// timeAdded, or a time that is not the taint's timeAdded gives ok false.
func EpisodeBootID(node *v1.Node) (bootID string, ok bool) {
	taint := nodeutil.FindTaint(node, names.OutOfServiceTaint)
	raw, has := node.Annotations[names.BootIDAnnotation]
	if taint == nil || taint.TimeAdded == nil || !has {
		return "", false
	}
	id, at, found := strings.Cut(raw, "@")
	if !found || at != taint.TimeAdded.UTC().Format(time.RFC3339) {
		return "", false
	}
	return id, true
}

// Decide is the single place that states when the out-of-service taint is
// removed and when the boot ID is recorded. terminating counts pods on the
// node with a deletion timestamp; vas counts the node's VolumeAttachments.
func Decide(node *v1.Node, terminating, vas int) Decision {
	if node == nil {
		return Decision{Why: "node does not exist"}
	}
	_, hasAny := node.Annotations[names.BootIDAnnotation]
	recorded, hasRecord := EpisodeBootID(node)
	current := node.Status.NodeInfo.BootID
	switch {
	case !nodeutil.HasTaint(node, names.OutOfServiceTaint):
		if hasAny {
			return Decision{ClearRecord: true, Why: "out-of-service taint is gone; forgetting the recorded boot ID"}
		}
		return Decision{Why: "node has no out-of-service taint"}
	case node.Annotations[names.OutOfServiceOwnerAnnotation] != "":
		return Decision{Why: "node-fencing added the out-of-service taint (annotation " + names.OutOfServiceOwnerAnnotation + "); it removes it when it unfences the node"}
	case node.Annotations[names.OutOfServiceAppliedByAnnotation] != "":
		return Decision{Why: fmt.Sprintf("%s applied the out-of-service taint (annotation %s); Fenceline never removes another fencer's taint",
			node.Annotations[names.OutOfServiceAppliedByAnnotation], names.OutOfServiceAppliedByAnnotation)}
	case !nodeutil.IsReady(node):
		if !hasRecord {
			return Decision{RecordBootID: true, Why: "out-of-service taint seen while the node is down; recording its boot ID for this taint"}
		}
		return Decision{Why: "node is not Ready"}
	case !hasRecord && hasAny:
		return Decision{Why: "the recorded boot ID belongs to an earlier out-of-service taint, not this one, so a reboot cannot be proven; a human must remove it"}
	case !hasRecord:
		return Decision{Why: "the taint was never seen while the node was down, so a reboot cannot be proven; a human must remove it"}
	case recorded == "" || current == "" || recorded == current:
		return Decision{Why: fmt.Sprintf("node is Ready but its boot ID (%q) has not changed from %q: no proven power cycle", current, recorded)}
	case terminating > 0:
		return Decision{Why: "pods are still terminating on the node"}
	case vas > 0:
		return Decision{Why: "VolumeAttachments remain for the node"}
	}
	return Decision{Untaint: true, ClearRecord: true, Why: "node rebooted (boot ID changed), is Ready, has no terminating pod and no VolumeAttachment"}
}
