package array

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Mode is a CSI access mode.
type Mode = csi.VolumeCapability_AccessMode_Mode

// State is everything the array remembers, persisted as one JSON document.
// The node-side records (what each node has staged and published) live here
// too, because in this mock one process plays the array and every node's
// plugin.
type State struct {
	Volumes map[string]*Volume `json:"volumes"`
	// NetworkFences are the CIDR blocks fenced through the csi-addons
	// FenceClusterNetwork call, keyed by the block in canonical form
	// (netip.Prefix.Masked().String()), with the time each was fenced.
	NetworkFences map[string]time.Time `json:"networkFences,omitempty"`
}

// Volume is one volume (a LUN, in array terms).
type Volume struct {
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes"`
	Parameters    map[string]string `json:"parameters,omitempty"`
	CreatedAt     time.Time         `json:"createdAt"`
	// Attachments are the nodes the volume is controller-published to (the
	// initiators in its host group), keyed by node ID.
	Attachments map[string]*Attachment `json:"attachments,omitempty"`
	// Fenced holds the nodes cut off by a fenced unpublish that have not yet
	// run their node-side clean-up (forced or not), with the time of the fence. A
	// fenced node's I/O is refused and it may not stage or publish the
	// volume again while it is listed here.
	Fenced map[string]time.Time `json:"fenced,omitempty"`
	// Nodes are the node-side records (staging path, published targets)
	// keyed by node ID. A node that has the volume staged or published is
	// "using" it.
	Nodes map[string]*NodeUse `json:"nodes,omitempty"`
}

// Attachment is one controller publication of a volume to a node.
type Attachment struct {
	AccessMode Mode      `json:"accessMode"`
	ReadOnly   bool      `json:"readOnly,omitempty"`
	Since      time.Time `json:"since"`
}

// NodeUse is what one node has done with a volume on its side.
type NodeUse struct {
	StagingPath string             `json:"stagingPath,omitempty"`
	AccessMode  Mode               `json:"accessMode,omitempty"`
	Targets     map[string]*Target `json:"targets,omitempty"`
}

// Target is one NodePublishVolume target path.
type Target struct {
	ReadOnly bool `json:"readOnly,omitempty"`
}

// InUse reports whether the node still has the volume staged or published.
func (u *NodeUse) InUse() bool {
	return u != nil && (u.StagingPath != "" || len(u.Targets) > 0)
}

// PublishedNodes returns the IDs of the nodes the volume is attached to,
// sorted.
func (v *Volume) PublishedNodes() []string {
	return slices.Sorted(maps.Keys(v.Attachments))
}

// Validate checks what JSON decoding cannot: every record is present and
// filed under its own ID. persist.Store.Load calls it.
func (s *State) Validate() error {
	for c := range s.NetworkFences {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Masked().String() != c {
			return fmt.Errorf("network fence %q is not a CIDR block in canonical form", c)
		}
	}
	for id, v := range s.Volumes {
		switch {
		case v == nil:
			return fmt.Errorf("volume %q has no record", id)
		case v.ID != id:
			return fmt.Errorf("volume filed as %q has ID %q", id, v.ID)
		case v.CapacityBytes < 0:
			return fmt.Errorf("volume %q has negative capacity", id)
		}
		for n, a := range v.Attachments {
			if a == nil || n == "" {
				return fmt.Errorf("volume %q has an empty attachment record for node %q", id, n)
			}
		}
		for n, u := range v.Nodes {
			if u == nil || n == "" {
				return fmt.Errorf("volume %q has an empty node record for node %q", id, n)
			}
			for p, t := range u.Targets {
				if t == nil || p == "" {
					return fmt.Errorf("volume %q has an empty target record %q on node %q", id, p, n)
				}
			}
		}
	}
	return nil
}

// Clone returns a deep copy of the state.
func (s *State) Clone() *State {
	out := &State{Volumes: make(map[string]*Volume, len(s.Volumes)), NetworkFences: maps.Clone(s.NetworkFences)}
	for id, v := range s.Volumes {
		out.Volumes[id] = v.Clone()
	}
	return out
}

// Clone returns a deep copy of the volume.
func (v *Volume) Clone() *Volume {
	c := *v
	c.Parameters = maps.Clone(v.Parameters)
	c.Fenced = maps.Clone(v.Fenced)
	if v.Attachments != nil {
		c.Attachments = make(map[string]*Attachment, len(v.Attachments))
		for n, a := range v.Attachments {
			ac := *a
			c.Attachments[n] = &ac
		}
	}
	if v.Nodes != nil {
		c.Nodes = make(map[string]*NodeUse, len(v.Nodes))
		for n, u := range v.Nodes {
			uc := *u
			if u.Targets != nil {
				uc.Targets = make(map[string]*Target, len(u.Targets))
				for p, t := range u.Targets {
					tc := *t
					uc.Targets[p] = &tc
				}
			}
			c.Nodes[n] = &uc
		}
	}
	return &c
}

// singleNode reports whether a mode allows only one node at a time (RWO,
// RWOP, ROO-single).
func singleNode(m Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}
