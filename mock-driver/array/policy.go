package array

import (
	"fmt"
	"maps"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// This file holds the array's rules as pure functions of the volume record,
// so that each rule is stated once and table-tested. The methods in
// controller.go, node.go and data.go look the volume up, call the rule and
// apply its outcome.

// Semantics are the switches that change the rules.
type Semantics struct {
	// Fence: the array honours fence=true on ControllerUnpublishVolume
	// (UNPUBLISH_FENCE). When false the field is ignored, like a driver
	// built before the extension existed.
	Fence bool
	// ForceUnpublish: the node plugin honours force=true on NodeUnpublish /
	// NodeUnstage (FORCE_UNPUBLISH): a forced unstage also removes targets
	// still published. When false the field is ignored. Either way any
	// clean-up of a fenced volume lifts the fence (see checkNodeCleanup).
	ForceUnpublish bool
	// Unpublish says what a plain unpublish of a volume the node still uses
	// does: refused (UnpublishStrict) or done, leaving the node write
	// access (UnpublishRealArray).
	Unpublish UnpublishMode
	// NoAttach models a driver whose CSIDriver says attachRequired: false:
	// it has no ControllerPublishVolume step, so a node stages a volume
	// without an attachment. Nothing is ever detached, so nothing is ever
	// fenced either.
	NoAttach bool
	// FakeFence models a driver that lies: it advertises UNPUBLISH_FENCE
	// but, like a driver without it (Fence false), treats fence=true as a
	// plain unpublish. Used to prove that fence-sanity catches such a
	// driver.
	FakeFence bool
	// MinimalController models a foreign driver that advertises only the
	// controller capabilities an attach needs (CREATE_DELETE_VOLUME and
	// PUBLISH_UNPUBLISH_VOLUME): no PUBLISH_READONLY, no LIST_VOLUMES*, no
	// SINGLE_NODE_MULTI_WRITER. Such a driver refuses readonly=true, which
	// the CSI spec forbids a CO to send it.
	MinimalController bool
}

// UnpublishMode is what the array does with a plain (unfenced)
// ControllerUnpublishVolume while the node still has the volume staged or
// published.
type UnpublishMode string

const (
	// UnpublishStrict refuses it with FAILED_PRECONDITION: the array cannot
	// tell whether detaching is safe, as KEP-2268 asks of such a driver.
	// Safe, but it hides a CO that sends a plain unpublish where a fence
	// was needed: the mistake never reaches the data.
	UnpublishStrict UnpublishMode = "strict"
	// UnpublishRealArray removes the attachment and answers OK, like most
	// real arrays and drivers: the unmapping does not stop a host that
	// still has the device open, so the node keeps write access and, once
	// the volume moves, two nodes can write. Safety tests use this mode so
	// that a plain unpublish where a fence was required shows up as
	// accepted writes.
	UnpublishRealArray UnpublishMode = "real-array"
)

// ParseUnpublishMode checks a mode name; "" is UnpublishStrict.
func ParseUnpublishMode(s string) (UnpublishMode, error) {
	switch m := UnpublishMode(s); m {
	case "":
		return UnpublishStrict, nil
	case UnpublishStrict, UnpublishRealArray:
		return m, nil
	}
	return "", fmt.Errorf("unknown unpublish mode %q: want %q or %q", s, UnpublishStrict, UnpublishRealArray)
}

// checkPublish decides ControllerPublishVolume of v to node. attachedOnNode
// is how many volumes the node has attached in all; max <= 0 means no
// limit. It returns already=true for an idempotent repeat.
func checkPublish(v *Volume, node string, mode Mode, readOnly bool, max int64, attachedOnNode int) (already bool, err error) {
	if _, fenced := v.Fenced[node]; fenced {
		return false, status.Errorf(codes.FailedPrecondition,
			"volume %s was fenced off node %s; the node must run its clean-up (NodeUnpublishVolume/NodeUnstageVolume) before it can have the volume again", v.ID, node)
	}
	if a, ok := v.Attachments[node]; ok {
		if a.ReadOnly != readOnly || a.AccessMode != mode {
			return false, status.Errorf(codes.AlreadyExists,
				"volume %s is already published to node %s with read_only=%t, access mode %s", v.ID, node, a.ReadOnly, a.AccessMode)
		}
		return true, nil
	}
	for _, other := range v.PublishedNodes() {
		if other == node {
			continue
		}
		a := v.Attachments[other]
		if singleNode(mode) || singleNode(a.AccessMode) {
			return false, status.Errorf(codes.FailedPrecondition,
				"volume %s is attached to node %s (%s); the array refuses a second attachment", v.ID, other, a.AccessMode)
		}
	}
	if max > 0 && int64(attachedOnNode) >= max {
		return false, status.Errorf(codes.ResourceExhausted,
			"node %s already has %d volumes attached, the maximum", node, attachedOnNode)
	}
	return false, nil
}

// unpublishAction is what ControllerUnpublishVolume does for one node.
type unpublishAction int

const (
	// unpublishNothing: nothing attached, nothing to cut off; answer OK.
	unpublishNothing unpublishAction = iota
	// unpublishDetach removes the attachment.
	unpublishDetach
	// unpublishFence removes the attachment and cuts the node off: its I/O
	// fails at once and it is quarantined until its node-side clean-up.
	unpublishFence
	// unpublishUnsafe removes the attachment while the node still uses the
	// volume and keeps its write access (UnpublishRealArray).
	unpublishUnsafe
)

// decideUnpublish decides ControllerUnpublishVolume of v from node.
func decideUnpublish(v *Volume, node string, fence bool, sem Semantics) (unpublishAction, error) {
	_, attached := v.Attachments[node]
	_, fenced := v.Fenced[node]
	use := v.Nodes[node]
	switch {
	case fenced && !attached:
		// Already cut off; repeating the unpublish (fenced or not) is a no-op.
		return unpublishNothing, nil
	case fence && sem.Fence && use.InUse():
		return unpublishFence, nil
	case fence && sem.Fence && attached:
		// The node already ran its node-side clean-up (it holds nothing of
		// the volume): there is nothing left to cut off, and no clean-up
		// would ever come to lift a quarantine, so the volume could never
		// return to this node. Detach without one.
		return unpublishDetach, nil
	case !attached && !use.InUse():
		return unpublishNothing, nil
	case use.InUse() && sem.Unpublish == UnpublishRealArray:
		return unpublishUnsafe, nil
	case use.InUse():
		return unpublishNothing, status.Errorf(codes.FailedPrecondition,
			"volume %s in use by node %s (staged at %q, published at %q); the array cannot tell whether detaching is safe",
			v.ID, node, use.StagingPath, slices.Sorted(maps.Keys(use.Targets)))
	default:
		return unpublishDetach, nil
	}
}

// checkNotFenced refuses node-side use of v (staging or publishing) by a
// node it is fenced off.
func checkNotFenced(v *Volume, node string) error {
	if _, fenced := v.Fenced[node]; fenced {
		return status.Errorf(codes.FailedPrecondition,
			"volume %s is fenced off node %s; run NodeUnpublishVolume/NodeUnstageVolume first", v.ID, node)
	}
	return nil
}

// checkNodeAccess decides whether node may stage v: it must not be fenced
// off and the volume must be attached to it (unless the driver has no
// attach step, sem.NoAttach).
func checkNodeAccess(v *Volume, node string, sem Semantics) error {
	if err := checkNotFenced(v, node); err != nil {
		return err
	}
	if _, ok := v.Attachments[node]; !ok && !sem.NoAttach {
		return status.Errorf(codes.FailedPrecondition,
			"volume %s is not attached to node %s; ControllerPublishVolume must come first", v.ID, node)
	}
	return nil
}

// cleanupForce is the force a NodeUnpublishVolume or NodeUnstageVolume
// acts with: the request's, when the driver honours FORCE_UNPUBLISH.
//
// Whether forced or not, a clean-up of a fenced volume succeeds and, once
// the node holds nothing more, lifts the fence: the upstream kubelet never
// sends force (it does not know the field), so a driver that insisted on it
// would keep a returning node fenced for ever. Unflushed data of a fenced
// volume is lost either way; the array refused it at the fence.
func cleanupForce(force bool, sem Semantics) bool {
	return force && sem.ForceUnpublish
}

// checkWrite decides a data-plane write of v from node.
func checkWrite(v *Volume, node string) error {
	if at, fenced := v.Fenced[node]; fenced {
		return status.Errorf(codes.PermissionDenied,
			"volume %s was fenced off node %s at %s; I/O refused", v.ID, node, at.UTC().Format("15:04:05.000000"))
	}
	a, attached := v.Attachments[node]
	if !attached && !v.Nodes[node].InUse() {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not published on node %s", v.ID, node)
	}
	if attached && a.ReadOnly {
		return status.Errorf(codes.PermissionDenied, "volume %s is published read-only to node %s", v.ID, node)
	}
	return nil
}

// checkNodePublishTarget decides NodePublishVolume of v at target on node
// once access is granted; already=true for an idempotent repeat.
func checkNodePublishTarget(v *Volume, node, target, staging string, mode Mode, readOnly bool) (already bool, err error) {
	use := v.Nodes[node]
	if use == nil || use.StagingPath == "" || use.StagingPath != staging {
		return false, status.Errorf(codes.FailedPrecondition,
			"volume %s is not staged at %q on node %s", v.ID, staging, node)
	}
	if t, ok := use.Targets[target]; ok {
		if t.ReadOnly != readOnly {
			return false, status.Errorf(codes.AlreadyExists,
				"volume %s is already published at %q with read_only=%t", v.ID, target, t.ReadOnly)
		}
		return true, nil
	}
	if mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER && len(use.Targets) > 0 {
		return false, status.Errorf(codes.FailedPrecondition,
			"volume %s is single-writer and already published at %q", v.ID, slices.Sorted(maps.Keys(use.Targets)))
	}
	return false, nil
}
