// Package cutoff is the vocabulary that fenceline-attacher and
// fenceline-controller share: is a node cut off from its storage, and why.
// It is a leaf: it imports only Kubernetes API types and other leaves, never
// pkg/attacher or pkg/controller, so that both components read the node the
// same way and neither depends on the other.
package cutoff

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Reason says why a node counts as cut off from its volumes.
type Reason string

const (
	// ReasonNone means the node is not known to be cut off.
	ReasonNone Reason = ""
	// ReasonOutOfService means the node carries the KEP-2268 out-of-service
	// taint (any value, any effect, as upstream's controllers read it): a
	// human or a fencing controller vouched that the node is off.
	ReasonOutOfService Reason = "out-of-service"
	// ReasonSafeDetach means the driver opted into safe detach, the node is
	// not Ready and fenceline-controller quarantined it. Nobody vouched that
	// the node is off: the storage fence is the only protection.
	ReasonSafeDetach Reason = "safe-detach"
	// ReasonForceEviction means an operator asked for force eviction
	// (fenceline.io/force-eviction:NoExecute) of a node that is not Ready.
	ReasonForceEviction Reason = "force-eviction"
	// ReasonFenced means a node-fencing controller reported the node fenced
	// (condition FencingComplete=True).
	ReasonFenced Reason = "fenced"
	// ReasonNodeGone means the Node object no longer exists. A deleted Node
	// proves nothing about the machine, which may still be writing, so a
	// driver that can fence is asked to.
	ReasonNodeGone Reason = "node-gone"
	// ReasonInUse means the VolumeAttachment is detached while the node
	// still lists its volume in status.volumesInUse: somebody forced the
	// detach (an out-of-service taint, the attach/detach controller's
	// 6-minute timeout, a release of volumesInUse) while the node may still
	// be writing. Nobody vouched that the node is off.
	ReasonInUse Reason = "in-use"
)

// Vouched reports whether the reason means a human or a fencing controller
// confirmed that the node is off (out-of-service, force-eviction, fenced), as
// opposed to safe-detach, where the storage fence is the only protection.
// Where nobody vouched, a driver that cannot fence must not detach at all.
func (r Reason) Vouched() bool {
	switch r {
	case ReasonOutOfService, ReasonForceEviction, ReasonFenced:
		return true
	}
	return false
}

// NodeReason returns why node counts as cut off from storage, or ReasonNone.
// safeDetach tells whether the driver opted into safe detach (see
// SafeDetachEnabled). A nil node is ReasonNodeGone. Reasons are checked in a
// fixed order (out-of-service, safe-detach, force-eviction, fenced) so that
// the reported reason is stable when several apply.
func NodeReason(node *v1.Node, safeDetach bool) Reason {
	if node == nil {
		return ReasonNodeGone
	}
	ready := nodeutil.IsReady(node)
	switch {
	case nodeutil.HasTaint(node, names.OutOfServiceTaint):
		return ReasonOutOfService
	case safeDetach && !ready && IsQuarantined(node):
		return ReasonSafeDetach
	case !ready && HasForceEvictionTaint(node):
		return ReasonForceEviction
	case FencingComplete(node):
		return ReasonFenced
	}
	return ReasonNone
}

// DetachInput is what DetachReason looks at for one detach.
type DetachInput struct {
	// Node is the VolumeAttachment's node; nil when the Node object is gone.
	Node *v1.Node
	// SafeDetach tells whether the driver opted into safe detach.
	SafeDetach bool
	// Intent is the fence intent a controller recorded on the
	// VolumeAttachment (names.FenceIntentAnnotation), nil when none.
	Intent *Record
	// Volume is the volume's name in node status (CSIUniqueVolumeName);
	// empty when unknown.
	Volume v1.UniqueVolumeName
}

// DetachReason returns why a detach from a node must be fenced, or
// ReasonNone. It is NodeReason widened by what outlives the node's
// condition, so that a node that came back before the detach ran cannot
// turn it plain:
//
//   - a fence intent recorded on the VolumeAttachment by whoever made the
//     detach inevitable (intent before cause);
//   - a Fenceline cut-off taint, Ready or not: quarantine (for a safe-detach
//     driver) and force-eviction stay on a node that is back until the
//     volumes released or evicted under them are detached; every detach
//     from the node in that time is fenced;
//   - the node still listing the volume in status.volumesInUse: the detach
//     was forced, whoever forced it (ReasonInUse).
//
// Reasons of the node come first (NodeReason's order), then the intent's,
// then the taints', then ReasonInUse, so that the reported reason is the
// strongest one that applies (a vouched reason before an unvouched one).
func DetachReason(in DetachInput) Reason {
	if r := NodeReason(in.Node, in.SafeDetach); r != ReasonNone {
		return r
	}
	switch {
	case in.Intent != nil && in.Intent.Reason != ReasonNone:
		return in.Intent.Reason
	case in.Intent != nil:
		return ReasonUnreadable
	case in.SafeDetach && IsQuarantined(in.Node):
		return ReasonSafeDetach
	case HasForceEvictionTaint(in.Node):
		return ReasonForceEviction
	case in.Volume != "" && slices.Contains(in.Node.Status.VolumesInUse, in.Volume):
		return ReasonInUse
	}
	return ReasonNone
}

// IsQuarantined reports whether the node carries the quarantine taint with
// its own effect (NoSchedule). A taint with the same key and another effect
// was not put there by fenceline-controller and is not a quarantine.
func IsQuarantined(node *v1.Node) bool {
	return nodeutil.HasTaintEffect(node, names.QuarantineTaint, v1.TaintEffectNoSchedule)
}

// HasForceEvictionTaint reports whether the node carries the force-eviction
// taint with the effect the ForceEviction proposal gives it (NoExecute).
func HasForceEvictionTaint(node *v1.Node) bool {
	return nodeutil.HasTaintEffect(node, names.ForceEvictionTaint, v1.TaintEffectNoExecute)
}

// NodeDown reports whether the node counts as down: not Ready, or fenced
// (FencingComplete=True, its power read back Off) while its Ready
// condition is still the stale one from before the fence.
// kube-controller-manager marks a dead node NotReady only after its
// node-monitor grace period (50 s by default); a verified power-off is
// proof enough before that. A Ready condition that turned True after the
// fence is a node that came back; when the two transitions fall in the
// same second (API times are stored to the second) the node counts as
// back: not down is the safe side.
func NodeDown(node *v1.Node) bool {
	if !nodeutil.IsReady(node) {
		return true
	}
	if !FencingComplete(node) {
		return false
	}
	fenced := nodeutil.Condition(node, names.FencingCompleteCondition).LastTransitionTime
	return nodeutil.ReadyCondition(node).LastTransitionTime.Before(&fenced)
}

// FencingComplete reports whether the node's FencingComplete condition is
// True.
func FencingComplete(node *v1.Node) bool {
	if node == nil {
		return false
	}
	for _, c := range node.Status.Conditions {
		if string(c.Type) == names.FencingCompleteCondition {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// SafeDetachEnabled reports whether the CSIDriver object opted into safe
// detach with the fenceline.io/safe-detach: "true" annotation.
func SafeDetachEnabled(driver *storagev1.CSIDriver) bool {
	return driver != nil && driver.Annotations[names.SafeDetachAnnotation] == "true"
}
