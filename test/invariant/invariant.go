// Package invariant checks the safety invariant of a failover over the mock
// driver's audit log, so that every failover test states it the same way
// and none can weaken it by accident:
//
//  1. every unpublish of the volume from the cut-off node that took effect
//     while the node still had the volume staged is fenced (a plain one
//     would leave a node that may be running with write access);
//  2. an unpublish from the cut-off node took effect before the volume was
//     published to the new node;
//  3. no write from the cut-off node is accepted after that publish.
//
// The core, Check, is a pure function of the audit records and of what the
// test knows (which node was cut off, from when), so that it can be
// table-tested with violating histories. It judges what the array did
// (audit.Effective: successful calls and lost answers), not what the CO
// was told.
package invariant

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
)

// Failover is what a test knows about one failover.
type Failover struct {
	// Volume is the handle of the volume that must move.
	Volume string
	// From is the node that was cut off (powered off or partitioned).
	From string
	// CutOff is when the test cut the node off. Unpublishes answered
	// earlier are not judged by rule 1: before the cut-off nothing asked
	// for a fence.
	CutOff time.Time
}

// Rule names one part of the invariant.
type Rule string

// The rules a Violation can break.
const (
	// RuleFenceRequired: a plain unpublish took effect while the cut-off
	// node still had the volume staged.
	RuleFenceRequired Rule = "fence-required"
	// RuleUnpublishFirst: the volume was published to the new node before
	// any unpublish from the cut-off node took effect.
	RuleUnpublishFirst Rule = "unpublish-before-publish"
	// RuleNoOldWrites: the array accepted a write from the cut-off node
	// after the volume was published to the new node.
	RuleNoOldWrites Rule = "no-old-writes-after-publish"
)

// Violation is one broken rule, at one record of the log.
type Violation struct {
	Rule Rule
	// Index is the offending record's position in the log.
	Index  int
	Record audit.Record
}

// String describes the violation for a test failure.
func (v Violation) String() string {
	r := v.Record
	return fmt.Sprintf("%s: record %d at %s: %s volume=%s node=%s fence=%t code=%s applied=%t",
		v.Rule, v.Index, r.Time.UTC().Format("15:04:05.000000"), r.Method, r.VolumeID, r.NodeID, r.Fence, r.Code, r.Applied)
}

// Result is the outcome of Check.
type Result struct {
	// Unpublish is the index of the last effective unpublish from the
	// cut-off node before Publish (or so far, when there is no Publish),
	// -1 if none.
	Unpublish int
	// Publish is the index of the first effective publish of the volume to
	// another node after the cut-off, -1 if the volume has not moved.
	Publish int
	// NewNode is the node of Publish.
	NewNode string
	// Violations lists every broken rule in log order; empty when the
	// invariant holds.
	Violations []Violation
}

// Moved reports whether the volume was published to another node.
func (r Result) Moved() bool { return r.Publish >= 0 }

// Err returns nil when the invariant holds, else an error listing every
// violation.
func (r Result) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	lines := make([]string, 0, len(r.Violations))
	for _, v := range r.Violations {
		lines = append(lines, v.String())
	}
	return errors.New("failover invariant violated:\n  " + strings.Join(lines, "\n  "))
}

// Broke reports whether rule is among the violations.
func (r Result) Broke(rule Rule) bool {
	for _, v := range r.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// state is what the scan knows about the cut-off node and the volume.
type state struct {
	staged bool // the node has the volume staged: it may be writing
	fenced bool // an effective fenced unpublish cut it off
}

// Check judges the audit records (in log order) of one failover. It stops
// at a publish of the volume back to the cut-off node after the move:
// what happens then is a new story.
func Check(recs []audit.Record, f Failover) Result {
	res := Result{Unpublish: -1, Publish: -1}
	var st state
	for i, r := range recs {
		if r.VolumeID != f.Volume {
			continue
		}
		if !step(&res, &st, f, i, r) {
			break
		}
	}
	return res
}

// step applies one record of the volume; it returns false when the scan
// must stop.
func step(res *Result, st *state, f Failover, i int, r audit.Record) bool {
	effective := audit.Effective()(r)
	fromOld := r.NodeID == f.From
	switch r.Method {
	case "ControllerPublishVolume":
		if !effective {
			return true
		}
		if fromOld {
			if res.Moved() {
				return false // moved back
			}
			res.Unpublish, st.fenced = -1, false
			return true
		}
		if !res.Moved() && !r.Time.Before(f.CutOff) {
			res.Publish, res.NewNode = i, r.NodeID
			if res.Unpublish < 0 {
				res.Violations = append(res.Violations, Violation{Rule: RuleUnpublishFirst, Index: i, Record: r})
			}
		}
	case "ControllerUnpublishVolume":
		// No node_id means every node, the cut-off one included.
		if !effective || !(fromOld || r.NodeID == "") {
			return true
		}
		if !r.Fence && st.staged && !st.fenced && !r.Time.Before(f.CutOff) {
			res.Violations = append(res.Violations, Violation{Rule: RuleFenceRequired, Index: i, Record: r})
		}
		if !res.Moved() {
			res.Unpublish = i
		}
		st.fenced = st.fenced || r.Fence
	case "NodeStageVolume":
		if fromOld && effective {
			st.staged, st.fenced = true, false
		}
	case "NodeUnstageVolume":
		if fromOld && effective {
			st.staged = false
		}
	case "Write":
		if fromOld && effective && res.Moved() {
			res.Violations = append(res.Violations, Violation{Rule: RuleNoOldWrites, Index: i, Record: r})
		}
	}
	return true
}
