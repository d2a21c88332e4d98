// Package fencing holds the single, pure decision of whether a detach of a
// VolumeAttachment must be a fenced detach (ControllerUnpublishVolume with
// fence=true) and why. It performs no I/O so that the safety rules are in one
// place, readable and covered by one table test.
package fencing

import (
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Reason says why a node is considered cut off from its volumes.
type Reason string

const (
	// ReasonNone means the node is not known to be down: plain detach.
	ReasonNone Reason = ""
	// ReasonOutOfService means the node carries the KEP-2268 out-of-service
	// taint (any value, any effect).
	ReasonOutOfService Reason = "out-of-service"
	// ReasonSafeDetach means the driver opted into safe detach, the node is
	// not Ready and the companion controller quarantined it.
	ReasonSafeDetach Reason = "safe-detach"
	// ReasonForceEviction means an operator asked for force eviction of a
	// node that is not Ready.
	ReasonForceEviction Reason = "force-eviction"
	// ReasonFenced means a node-fencing controller reported the node fenced
	// (condition FencingComplete=True).
	ReasonFenced Reason = "fenced"
)

// Mode is how ControllerUnpublishVolume is called.
type Mode string

const (
	// ModePlain is an ordinary ControllerUnpublishVolume, exactly as the
	// upstream external-attacher sends it.
	ModePlain Mode = "plain"
	// ModeFenced is ControllerUnpublishVolume with fence=true.
	ModeFenced Mode = "fenced"
)

// Input is everything the decision looks at.
type Input struct {
	// Node is the VolumeAttachment's node; nil when the Node object is gone.
	Node *v1.Node
	// Driver is the CSIDriver object of the attacher's driver; nil when the
	// cluster has none.
	Driver *storagev1.CSIDriver
	// DriverCanFence is true when the CSI driver advertises UNPUBLISH_FENCE.
	DriverCanFence bool
}

// Decision is the outcome of Decide.
type Decision struct {
	// Reason is why the node counts as cut off, ReasonNone if it does not.
	Reason Reason
	// Mode is the way to call ControllerUnpublishVolume.
	Mode Mode
	// Unsupported is true when there is a reason to fence but the driver
	// cannot: the detach is plain and the user should be warned.
	Unsupported bool
}

// Decide returns whether a detach from in.Node is fenced and why. Reasons are
// checked in a fixed order (out-of-service, safe-detach, force-eviction,
// fenced) so that the reported reason is stable when several apply. Without a
// reason, or without a Node object, the detach is plain, as upstream's.
func Decide(in Input) Decision {
	reason := NodeReason(in.Node, SafeDetachEnabled(in.Driver))
	switch {
	case reason == ReasonNone:
		return Decision{Mode: ModePlain}
	case in.DriverCanFence:
		return Decision{Reason: reason, Mode: ModeFenced}
	default:
		return Decision{Reason: reason, Mode: ModePlain, Unsupported: true}
	}
}

// NodeReason returns why node counts as cut off from storage, or ReasonNone.
// safeDetach tells whether the driver opted into safe detach. A nil node has
// no reason: a Node object that is gone proves nothing about the machine.
func NodeReason(node *v1.Node, safeDetach bool) Reason {
	if node == nil {
		return ReasonNone
	}
	ready := nodeutil.IsReady(node)
	switch {
	case nodeutil.HasTaint(node, names.OutOfServiceTaint):
		return ReasonOutOfService
	case safeDetach && !ready && nodeutil.HasTaint(node, names.QuarantineTaint):
		return ReasonSafeDetach
	case !ready && nodeutil.HasTaint(node, names.ForceEvictionTaint):
		return ReasonForceEviction
	case conditionTrue(node, names.FencingCompleteCondition):
		return ReasonFenced
	}
	return ReasonNone
}

// SafeDetachEnabled reports whether the CSIDriver object opted into safe
// detach with the fenceline.io/safe-detach: "true" annotation.
func SafeDetachEnabled(driver *storagev1.CSIDriver) bool {
	return driver != nil && driver.Annotations[names.SafeDetachAnnotation] == "true"
}

func conditionTrue(node *v1.Node, condType string) bool {
	for _, c := range node.Status.Conditions {
		if string(c.Type) == condType {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
