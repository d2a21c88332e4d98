package invariant

import (
	"fenceline.io/fenceline/mock-driver/audit"
)

// RuleTwoWriters: the array accepted a write to a single-writer volume
// from a node after the volume was published to another node (and not
// published back to the writer since): two nodes could write.
const RuleTwoWriters Rule = "never-two-writers"

// volumeState is what CheckHistory knows about one volume.
type volumeState struct {
	published map[string]bool // effective publish not yet undone by an unpublish
	staged    map[string]bool // effective stage not yet undone by an unstage
	fenced    map[string]bool // cut off by an effective fenced unpublish
	last      string          // node of the latest effective publish
}

// CheckHistory judges a whole audit log, every volume and every move, not
// one failover the test knows of: it needs no cut-off time, so it fits
// randomized runs where several nodes fail, come back and fail again.
// singleWriter says which volumes may be published to one node at a time
// (ReadWriteOnce); only those are judged. For each of them:
//
//   - RuleUnpublishFirst: a publish to a node while another node still
//     has it published;
//   - RuleFenceRequired: a plain unpublish from a node that still has it
//     staged and was not fenced (that node keeps writing);
//   - RuleTwoWriters: a write accepted from a node after the volume's
//     latest publish went to another node.
//
// It judges what the array did (audit.Effective), in log order.
func CheckHistory(recs []audit.Record, singleWriter func(volume string) bool) []Violation {
	var out []Violation
	vols := map[string]*volumeState{}
	effective := audit.Effective()
	for i, r := range recs {
		if r.VolumeID == "" || !effective(r) || !singleWriter(r.VolumeID) {
			continue
		}
		v := vols[r.VolumeID]
		if v == nil {
			v = &volumeState{published: map[string]bool{}, staged: map[string]bool{}, fenced: map[string]bool{}}
			vols[r.VolumeID] = v
		}
		if rule, broke := v.step(r); broke {
			out = append(out, Violation{Rule: rule, Index: i, Record: r})
		}
	}
	return out
}

// step applies one effective record and returns the rule it breaks, if any.
func (v *volumeState) step(r audit.Record) (Rule, bool) {
	switch r.Method {
	case "ControllerPublishVolume":
		var other bool
		for n := range v.published {
			other = other || n != r.NodeID
		}
		v.published[r.NodeID], v.fenced[r.NodeID], v.last = true, false, r.NodeID
		if other {
			return RuleUnpublishFirst, true
		}
	case "ControllerUnpublishVolume":
		// No node_id means every node.
		var broke bool
		for n := range v.published {
			if r.NodeID != "" && n != r.NodeID {
				continue
			}
			broke = broke || (!r.Fence && v.staged[n] && !v.fenced[n])
			delete(v.published, n)
			v.fenced[n] = v.fenced[n] || r.Fence
		}
		if r.NodeID != "" {
			broke = broke || (!r.Fence && v.staged[r.NodeID] && !v.fenced[r.NodeID])
			v.fenced[r.NodeID] = v.fenced[r.NodeID] || r.Fence
		}
		if broke {
			return RuleFenceRequired, true
		}
	case "NodeStageVolume":
		v.staged[r.NodeID] = true
	case "NodeUnstageVolume":
		delete(v.staged, r.NodeID)
	case "Write":
		if v.last != "" && v.last != r.NodeID {
			return RuleTwoWriters, true
		}
	}
	return "", false
}
