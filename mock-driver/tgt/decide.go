package tgt

import (
	"fmt"
)

// FenceMethod is how the backend cuts a node off a volume on a fence.
type FenceMethod string

const (
	// MethodACLSessions revokes the node's initiator from the target's ACL
	// and ends every live session of that initiator on the target, then
	// confirms that none is left. The default, and the only correct fence
	// of the two: a revoked ACL refuses new logins only.
	MethodACLSessions FenceMethod = "acl+sessions"
	// MethodACL only revokes the ACL. The node's established session keeps
	// reading and writing at full speed, so this is no fence; it exists to
	// prove that the tests catch it.
	MethodACL FenceMethod = "acl"
	// MethodPR is SCSI-3 persistent reservations: the backend holds a
	// Write Exclusive - Registrants Only reservation on every volume, each
	// node registers its key (ReservationKey) when it stages, and a fence
	// revokes the ACL and preempts the node's key, so its writes fail with
	// RESERVATION CONFLICT on whatever session they arrive.
	MethodPR FenceMethod = "pr"
)

// ParseFenceMethod checks a method name; "" is MethodACLSessions.
func ParseFenceMethod(s string) (FenceMethod, error) {
	switch m := FenceMethod(s); m {
	case "":
		return MethodACLSessions, nil
	case MethodACLSessions, MethodACL, MethodPR:
		return m, nil
	}
	return "", fmt.Errorf("unknown fence method %q: want %q, %q or %q", s, MethodACLSessions, MethodPR, MethodACL)
}

// Cut is what the backend is asked to do to one initiator's access to one
// target.
type Cut int

const (
	// CutRevoke is a plain unpublish: the initiator may no longer log in.
	// Its live sessions are left alone, as a real array's unmapping leaves
	// a host that still has the device open.
	CutRevoke Cut = iota + 1
	// CutFence is a fence: no login, and no I/O through a session either,
	// as far as the fence method goes.
	CutFence
)

// StepKind is one tgtadm operation of a cut.
type StepKind int

const (
	// StepUnbind removes the initiator from the target's ACL.
	StepUnbind StepKind = iota + 1
	// StepEndConnection deletes one connection of a session; a session
	// whose last connection goes ends with it.
	StepEndConnection
)

// Step is one operation at the target.
type Step struct {
	Kind StepKind
	SID  int
	CID  int
}

// endsSessions reports whether a cut must end the initiator's sessions.
func endsSessions(cut Cut, m FenceMethod) bool {
	return cut == CutFence && m == MethodACLSessions
}

// PlanCut decides the operations that cut initiator off t, from what tgtd
// reports now. It is pure: the backend calls it again on a fresh listing
// after each round, until CheckCut confirms. A target that does not exist
// (nil) needs nothing: nobody can log in to it or hold a session on it.
func PlanCut(t *Target, initiator string, cut Cut, m FenceMethod) []Step {
	if t == nil {
		return nil
	}
	var steps []Step
	// Revoke first: once the ACL is gone no new session can start, so the
	// sessions ended next cannot be replaced behind our back.
	if t.Allowed(initiator) {
		steps = append(steps, Step{Kind: StepUnbind})
	}
	if !endsSessions(cut, m) {
		return steps
	}
	for _, s := range t.SessionsOf(initiator) {
		for _, c := range s.Connections {
			steps = append(steps, Step{Kind: StepEndConnection, SID: s.SID, CID: c})
		}
	}
	return steps
}

// CheckCut says whether the cut is in effect on t: nil only when the
// initiator is off the ACL and, for a cut that ends sessions, holds no
// session on the target. The backend answers OK to a fence only after this
// returned nil on a listing read after its last operation.
func CheckCut(t *Target, initiator string, cut Cut, m FenceMethod) error {
	if t == nil {
		return nil
	}
	if t.Allowed(initiator) {
		return fmt.Errorf("initiator %s is still in the ACL of target %s", initiator, t.Name)
	}
	if !endsSessions(cut, m) {
		return nil
	}
	if ss := t.SessionsOf(initiator); len(ss) > 0 {
		sids := make([]int, 0, len(ss))
		for _, s := range ss {
			sids = append(sids, s.SID)
		}
		return fmt.Errorf("initiator %s still has %d session(s) on target %s (session IDs %v)", initiator, len(ss), t.Name, sids)
	}
	return nil
}

// CheckGrant says whether initiator may log in to t.
func CheckGrant(t *Target, initiator string) error {
	if t == nil {
		return fmt.Errorf("target does not exist")
	}
	if !t.Allowed(initiator) {
		return fmt.Errorf("initiator %s is not in the ACL of target %s", initiator, t.Name)
	}
	return nil
}
