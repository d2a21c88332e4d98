package array

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// FenceRecord is one fence the array enforces: Node is cut off Volume
// since Since, until its node-side clean-up or a LiftFences ends it.
type FenceRecord struct {
	Volume string
	Node   string
	Since  time.Time
	// Details says, for humans, what the fence holds: what the node still
	// has of the volume and, with real storage, what was cut there.
	Details string
}

// FenceDescriber is what a Storage may implement besides Storage: a line
// on how a fence of node off the volume is carried out on it, added to the
// details of the fences the array lists.
type FenceDescriber interface {
	DescribeFence(volID, node string) string
}

// Fences returns the fences in force, of node only when node is not
// empty, ordered by volume and node. Volume.Fenced is the only record of
// fences: the fenced unpublish writes it, the node-side clean-up and
// LiftFences remove from it.
func (a *Array) Fences(node string) []FenceRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []FenceRecord
	for _, id := range slices.Sorted(maps.Keys(a.state.Volumes)) {
		v := a.state.Volumes[id]
		for _, n := range slices.Sorted(maps.Keys(v.Fenced)) {
			if node == "" || n == node {
				out = append(out, a.fenceRecord(v, n))
			}
		}
	}
	return out
}

// LiftFences lifts node's fences on volIDs (on every volume when volIDs is
// empty) and returns those it lifted. A volume or node the array does not
// know, or a volume the node is not fenced off, lifts nothing and is no
// error, so that a repeated lift succeeds.
//
// Lifting only ends the quarantine. It grants nothing on the storage and
// attaches nothing: the node gets the volume again only through a later
// ControllerPublishVolume, and its I/O is refused until then because it is
// neither attached nor, any more, using the volume. What the node still had
// staged or published is forgotten: the caller lifts only once the node
// holds nothing of the volume (it rebooted, or is gone), so those records
// describe mounts that no longer exist. The node's clean-up of the old
// paths still answers OK, and the volume can be deleted.
func (a *Array) LiftFences(node string, volIDs []string) ([]FenceRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := volIDs
	if len(ids) == 0 {
		ids = slices.Sorted(maps.Keys(a.state.Volumes))
	}
	var lifted []FenceRecord
	for _, id := range ids {
		if v, ok := a.state.Volumes[id]; ok && fencedOff(v, node) {
			lifted = append(lifted, a.fenceRecord(v, node))
		}
	}
	if len(lifted) == 0 {
		return nil, nil
	}
	err := a.update(func(s *State) {
		for _, f := range lifted {
			liftFence(s.Volumes[f.Volume], node)
		}
	})
	if err != nil {
		return nil, err
	}
	return lifted, nil
}

// fencedOff reports whether v's node is quarantined.
func fencedOff(v *Volume, node string) bool {
	_, fenced := v.Fenced[node]
	return fenced
}

// liftFence is LiftFences' rule for one volume: forget what the node held,
// then end the quarantine as a clean-up does (liftQuarantine). Attachments
// are left alone: a fenced node has none, and a lift must not make one.
func liftFence(v *Volume, node string) {
	delete(v.Nodes, node)
	liftQuarantine(v, node)
}

// fenceRecord describes the fence of node off v.
func (a *Array) fenceRecord(v *Volume, node string) FenceRecord {
	details := "quarantined until the node's clean-up; I/O refused"
	if u := v.Nodes[node]; u.InUse() {
		details += fmt.Sprintf("; the node still has it staged at %q, published at %q", u.StagingPath, slices.Sorted(maps.Keys(u.Targets)))
	}
	if d, ok := a.opts.Storage.(FenceDescriber); ok {
		details += "; " + d.DescribeFence(v.ID, node)
	}
	return FenceRecord{Volume: v.ID, Node: node, Since: v.Fenced[node], Details: details}
}
