// Package fencing holds the attacher's single, pure decision of how a
// VolumeAttachment is detached: ControllerUnpublishVolume with fence=true,
// a plain one, none at all (refused), or not yet (confirm on fresh data).
// It performs no I/O so that the safety rules are in one place, readable and
// covered by one table test; the controller only gathers inputs, calls
// Decide, and acts.
package fencing

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/cutoff"
)

// Action is what the attacher does with a detach.
type Action string

const (
	// ActionPlain is an ordinary ControllerUnpublishVolume, exactly as the
	// upstream external-attacher sends it.
	ActionPlain Action = "plain"
	// ActionFenced is ControllerUnpublishVolume with fence=true.
	ActionFenced Action = "fenced"
	// ActionRefuse means no ControllerUnpublishVolume at all: the detach
	// needs a fence the driver cannot give. The finalizer stays, the error
	// is recorded in status.detachError and the detach is retried.
	ActionRefuse Action = "refused"
	// ActionConfirm means the inputs point to a plain detach by a driver
	// that can fence, but they came from informer caches: read the Node and
	// CSIDriver from the API and decide again, so that a lagging watch can
	// never turn a fenced detach into a plain one.
	ActionConfirm Action = "confirm"
)

// Input is everything the decision looks at.
type Input struct {
	// Record is the fence decision already saved on the VolumeAttachment,
	// nil when there is none.
	Record *Record
	// Intent is the fence intent a controller saved on the VolumeAttachment
	// before it made the detach inevitable, nil when there is none.
	Intent *Record
	// Volume is the volume's name in node status
	// (nodeutil.CSIUniqueVolumeName): a detach of a volume the node still
	// lists in volumesInUse was forced.
	Volume v1.UniqueVolumeName
	// Node is the VolumeAttachment's node; nil when the Node object is gone.
	Node *v1.Node
	// Driver is the CSIDriver object of the attacher's driver; nil when the
	// cluster has none.
	Driver *storagev1.CSIDriver
	// DriverCanFence is true when the CSI driver advertises UNPUBLISH_FENCE.
	DriverCanFence bool
	// Fresh is true when Node and Driver were just read from the API server
	// rather than from the informer caches.
	Fresh bool
	// Blind is true when the attacher may not read Nodes or CSIDrivers
	// (RBAC rules missing, see Blindness): Node and Driver carry nothing,
	// so no node can be known to be cut off.
	Blind bool
}

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// Reason is why the node counts as cut off, cutoff.ReasonNone if not.
	Reason cutoff.Reason
	// WriteRecord is true when the decision is fenced and not yet saved on
	// the VolumeAttachment: save it before the first ControllerUnpublishVolume.
	WriteRecord bool
	// Unsupported is true when a human or a fencing controller vouched that
	// the node is off but the driver cannot fence: the detach is plain, as
	// upstream's, and the user is warned.
	Unsupported bool
	// Why explains a refusal or a fallback, for Events and logs.
	Why string
}

// Decide states, once, how a detach is done:
//
//   - A recorded fence is sticky: the detach stays fenced whatever happened
//     to the Node, the CSIDriver or the attacher since; if the driver no
//     longer advertises UNPUBLISH_FENCE the detach is refused, never plain.
//   - A detach with a reason (cutoff.DetachReason: the node's, a Node
//     object that is gone, a controller's fence intent, a Fenceline cut-off
//     taint on a node that is back, the volume still in volumesInUse) is
//     fenced by a driver that can fence, and the decision is recorded first.
//   - A driver that cannot fence: plain with a warning where a human or a
//     fencing controller vouched that the node is off (upstream's fallback);
//     refused on the safe-detach path, where the fence is the only
//     protection; plain for a gone Node or a volume still in use, as
//     upstream.
//   - No reason (or only a volume in use), a driver that can fence, cached
//     inputs: confirm on fresh inputs first. No reason on fresh inputs (or
//     a driver that cannot fence): plain.
//   - Blind (no right to read Nodes or CSIDrivers): plain, exactly as
//     upstream, unless a fence was recorded or intended on the
//     VolumeAttachment. The attacher then tells fenceline-controller it
//     cannot fence (heartbeat), so that nothing relies on a fence it would
//     not give.
func Decide(in Input) Decision {
	if in.Record != nil {
		if in.DriverCanFence {
			return Decision{Action: ActionFenced, Reason: in.Record.Reason}
		}
		return Decision{Action: ActionRefuse, Reason: in.Record.Reason,
			Why: fmt.Sprintf("the detach was decided fenced (%s) but the driver no longer advertises UNPUBLISH_FENCE; a plain detach could hand the volume to another node while node ID %q still writes", in.Record.Reason, in.Record.NodeID)}
	}
	var reason cutoff.Reason
	switch {
	case in.Blind && in.Intent == nil:
		return Decision{Action: ActionPlain, Why: "the attacher may not read Nodes or CSIDrivers, so it cannot tell a cut-off node; detaching as the upstream attacher does"}
	case in.Blind:
		reason = cutoff.DetachReason(cutoff.DetachInput{Node: &v1.Node{}, Intent: in.Intent})
	default:
		reason = cutoff.DetachReason(cutoff.DetachInput{Node: in.Node, SafeDetach: cutoff.SafeDetachEnabled(in.Driver), Intent: in.Intent, Volume: in.Volume})
	}
	switch {
	case (reason == cutoff.ReasonNone || reason == cutoff.ReasonInUse) && in.DriverCanFence && !in.Fresh:
		// A cached node that still lists the volume in use may only lag
		// behind the kubelet's report that it unmounted it (which is what
		// let the attach/detach controller detach): confirm that one too.
		return Decision{Action: ActionConfirm}
	case reason == cutoff.ReasonNone:
		return Decision{Action: ActionPlain}
	case in.DriverCanFence:
		return Decision{Action: ActionFenced, Reason: reason, WriteRecord: true}
	case reason.Vouched():
		return Decision{Action: ActionPlain, Reason: reason, Unsupported: true,
			Why: fmt.Sprintf("node is cut off (%s) but the driver does not advertise UNPUBLISH_FENCE; detaching without fencing", reason)}
	case reason == cutoff.ReasonSafeDetach:
		return Decision{Action: ActionRefuse, Reason: reason,
			Why: "the node is quarantined (safe-detach) but the driver does not advertise UNPUBLISH_FENCE; nobody confirmed the node is off, so the volume is not detached"}
	}
	// The Node object is gone, or the detach was forced while the volume
	// was in use, and the driver cannot fence: as upstream.
	return Decision{Action: ActionPlain, Reason: reason}
}

// Blindness says whether the attacher runs blind, and why: it is blind
// when it may not read Nodes or may not read CSIDrivers. Both are needed
// to fence safely: without Nodes it cannot see that a node is cut off;
// without CSIDrivers it cannot see a driver's safe-detach opt-in and would
// take a quarantined node for a healthy one. A blind attacher detaches
// plain (as upstream) and advertises no fence capability in its heartbeat.
// missing lists the rules denied (any text, e.g. "list nodes").
func Blindness(nodesDenied, csiDriversDenied []string) (blind bool, why string) {
	denied := append(append([]string(nil), nodesDenied...), csiDriversDenied...)
	if len(denied) == 0 {
		return false, ""
	}
	return true, fmt.Sprintf("RBAC does not allow %s: detaches are never fenced until these rules are granted (see the attacher's RBAC)", strings.Join(denied, ", "))
}

// NeedsFreshDriver reports whether a detach decision from node depends on
// the CSIDriver's safe-detach opt-in, i.e. whether confirming it needs a
// fresh read of the CSIDriver too, not only of the Node.
func NeedsFreshDriver(node *v1.Node) bool {
	return cutoff.DetachReason(cutoff.DetachInput{Node: node, SafeDetach: true}) !=
		cutoff.DetachReason(cutoff.DetachInput{Node: node})
}

// DetachNodeID returns the CSI node ID a detach targets.
//
// A fenced detach targets the one a recorded fence names, else the one a
// fence intent names, else the one recorded on the VolumeAttachment at
// attach time, else the node's current CSINode entry: a node re-installed
// under the same name has a new ID, and it is the old initiator, the one
// that was published, that must be cut off.
//
// A plain detach targets what upstream's external-attacher does: the
// node's current CSINode entry, else the ID recorded at attach time.
func DetachNodeID(fenced bool, rec, intent *Record, attachedID, csiNodeID string) (string, error) {
	var candidates []string
	if fenced {
		if rec != nil {
			candidates = append(candidates, rec.NodeID)
		}
		if intent != nil {
			candidates = append(candidates, intent.NodeID)
		}
		candidates = append(candidates, attachedID, csiNodeID)
	} else {
		candidates = append(candidates, csiNodeID, attachedID)
	}
	for _, id := range candidates {
		if id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("no CSI node ID: no fence record or intent naming one, no node ID recorded at attach time and no CSINode entry")
}
