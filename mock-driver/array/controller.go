package array

import (
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Publish-context keys that ControllerPublishVolume returns and the node
// plugin checks at NodeStageVolume, like the LUN and target a real array
// hands to the host.
const (
	PublishContextNode   = "mock.fenceline.io/node"
	PublishContextDevice = "mock.fenceline.io/device"
)

const listTokenPrefix = "after:"

// CreateVolume creates a volume, or returns the existing one of the same name
// when its size fits the range. limit <= 0 means no upper limit.
func (a *Array) CreateVolume(name string, required, limit int64, params map[string]string) (*Volume, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.state.Volumes {
		if v.Name != name {
			continue
		}
		if v.CapacityBytes < required || (limit > 0 && v.CapacityBytes > limit) {
			return nil, status.Errorf(codes.AlreadyExists,
				"volume %q exists with %d bytes, outside the requested range", name, v.CapacityBytes)
		}
		return v.Clone(), nil
	}
	size := required
	if size == 0 {
		size = DefaultVolumeSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if free := a.opts.Capacity - used(a.state); size > free {
		return nil, status.Errorf(codes.ResourceExhausted, "array has %d bytes free, %d requested", free, size)
	}
	id, err := newVolumeID()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	v := &Volume{ID: id, Name: name, CapacityBytes: size, Parameters: maps.Clone(params), CreatedAt: a.opts.Now()}
	if st := a.opts.Storage; st != nil {
		if err := st.CreateVolume(id, size); err != nil {
			return nil, err
		}
	}
	if err := a.update(func(s *State) { s.Volumes[id] = v }); err != nil {
		if st := a.opts.Storage; st != nil {
			// Nobody learns this ID, so nobody could delete it later.
			_ = st.DeleteVolume(id)
		}
		return nil, err
	}
	return v.Clone(), nil
}

// DeleteVolume deletes a volume. Unknown IDs succeed (deletion is
// idempotent); a volume still attached or used by a node is refused.
func (a *Array) DeleteVolume(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.state.Volumes[id]
	if !ok {
		return nil
	}
	if len(v.Attachments) > 0 {
		return status.Errorf(codes.FailedPrecondition, "volume %s is still attached to %q", id, v.PublishedNodes())
	}
	for n, u := range v.Nodes {
		if u.InUse() {
			return status.Errorf(codes.FailedPrecondition, "volume %s is still in use by node %s", id, n)
		}
	}
	if st := a.opts.Storage; st != nil {
		if err := st.DeleteVolume(id); err != nil {
			return err
		}
	}
	return a.update(func(s *State) { delete(s.Volumes, id) })
}

// Volume returns a copy of one volume.
func (a *Array) Volume(id string) (*Volume, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, id)
	if err != nil {
		return nil, err
	}
	return v.Clone(), nil
}

// ListVolumes returns up to max volumes (all when max <= 0) in ID order,
// starting after the position named by token, and the token for the next
// page ("" at the end). A token names the last ID returned, so it stays
// valid when that volume is deleted; a token the array did not issue is
// Aborted, as the CSI spec asks.
func (a *Array) ListVolumes(max int, token string) ([]*Volume, string, error) {
	after := ""
	if token != "" {
		var ok bool
		after, ok = strings.CutPrefix(token, listTokenPrefix)
		if !ok || after == "" {
			return nil, "", status.Errorf(codes.Aborted, "invalid starting_token %q", token)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := slices.Sorted(maps.Keys(a.state.Volumes))
	start, _ := slices.BinarySearch(ids, after)
	if after != "" && start < len(ids) && ids[start] == after {
		start++
	}
	ids = ids[start:]
	next := ""
	if max > 0 && len(ids) > max {
		ids = ids[:max]
		next = listTokenPrefix + ids[len(ids)-1]
	}
	out := make([]*Volume, 0, len(ids))
	for _, id := range ids {
		out = append(out, a.state.Volumes[id].Clone())
	}
	return out, next, nil
}

// AvailableCapacity returns the free bytes.
func (a *Array) AvailableCapacity() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.opts.Capacity - used(a.state)
}

// Publish attaches a volume to a node and returns the publish context.
func (a *Array) Publish(volID, node string, mode Mode, readOnly bool) (map[string]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return nil, err
	}
	if !a.nodes[node] {
		return nil, status.Errorf(codes.NotFound, "node %s is not known to the array", node)
	}
	if err := a.checkNetworkAccess(node, codes.FailedPrecondition); err != nil {
		return nil, err
	}
	// Counting walks every volume: only a limit needs the count.
	onNode := 0
	if a.opts.MaxVolumesPerNode > 0 {
		onNode = attachedOn(a.state, node)
	}
	already, err := checkPublish(v, node, mode, readOnly, a.opts.MaxVolumesPerNode, onNode)
	if err != nil {
		return nil, err
	}
	pc := map[string]string{PublishContextNode: node, PublishContextDevice: "/dev/mock/" + volID}
	if st := a.opts.Storage; st != nil {
		// Also on a repeat: the grant may be what a failed call left undone.
		extra, err := st.Grant(volID, node)
		if err != nil {
			return nil, err
		}
		maps.Copy(pc, extra)
	}
	if already {
		return pc, nil
	}
	err = a.update(func(s *State) {
		nv := s.Volumes[volID]
		if nv.Attachments == nil {
			nv.Attachments = map[string]*Attachment{}
		}
		nv.Attachments[node] = &Attachment{AccessMode: mode, ReadOnly: readOnly, Since: a.opts.Now()}
	})
	if err != nil {
		return nil, err
	}
	return pc, nil
}

// Unpublish detaches a volume from a node (from every node when node is
// empty). With fence it cuts the node off first. Unknown volumes and
// nodes succeed: the volume is not attached there.
func (a *Array) Unpublish(volID, node string, fence bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.state.Volumes[volID]
	if !ok {
		return nil
	}
	nodes := []string{node}
	if node == "" {
		nodes = involvedNodes(v)
	}
	actions := map[string]unpublishAction{}
	for _, n := range nodes {
		act, err := decideUnpublish(v, n, fence, a.opts.Semantics)
		if err != nil {
			return err
		}
		if err := a.cutStorage(volID, n, decideStorageCut(act, fence, a.opts.Semantics)); err != nil {
			return err
		}
		if act != unpublishNothing {
			actions[n] = act
		}
	}
	if len(actions) == 0 {
		return nil
	}
	now := a.opts.Now()
	return a.update(func(s *State) {
		nv := s.Volumes[volID]
		for n, act := range actions {
			delete(nv.Attachments, n)
			if act == unpublishFence {
				if nv.Fenced == nil {
					nv.Fenced = map[string]time.Time{}
				}
				nv.Fenced[n] = now
			}
		}
	})
}

// cutStorage carries a storage cut out, before the unpublish is committed.
func (a *Array) cutStorage(volID, node string, cut storageCut) error {
	st := a.opts.Storage
	switch {
	case st == nil || cut == cutNone:
		return nil
	case cut == cutFence:
		return st.Fence(volID, node)
	default:
		return st.Revoke(volID, node)
	}
}

// involvedNodes lists every node attached to or using the volume.
func involvedNodes(v *Volume) []string {
	set := map[string]bool{}
	for n := range v.Attachments {
		set[n] = true
	}
	for n, u := range v.Nodes {
		if u.InUse() {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func used(s *State) int64 {
	var n int64
	for _, v := range s.Volumes {
		n += v.CapacityBytes
	}
	return n
}

func attachedOn(s *State, node string) int {
	n := 0
	for _, v := range s.Volumes {
		if _, ok := v.Attachments[node]; ok {
			n++
		}
	}
	return n
}
