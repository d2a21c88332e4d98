package array

import (
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

const (
	rwo  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rwop = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	rwx  = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	rox  = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// vol builds a Volume record for policy tests.
type vol struct{ v *Volume }

func newVol() *vol { return &vol{v: &Volume{ID: "vol-1", Name: "pvc-1", CapacityBytes: 1 << 30}} }

func (b *vol) attached(node string, mode Mode) *vol {
	if b.v.Attachments == nil {
		b.v.Attachments = map[string]*Attachment{}
	}
	b.v.Attachments[node] = &Attachment{AccessMode: mode, Since: t0}
	return b
}

func (b *vol) attachedRO(node string, mode Mode) *vol {
	b.attached(node, mode)
	b.v.Attachments[node].ReadOnly = true
	return b
}

func (b *vol) staged(node, path string) *vol {
	nodeUse(b.v, node).StagingPath = path
	return b
}

func (b *vol) published(node, target string) *vol {
	u := nodeUse(b.v, node)
	if u.Targets == nil {
		u.Targets = map[string]*Target{}
	}
	u.Targets[target] = &Target{}
	return b
}

func (b *vol) fenced(node string) *vol {
	if b.v.Fenced == nil {
		b.v.Fenced = map[string]time.Time{}
	}
	b.v.Fenced[node] = t0
	return b
}

func (b *vol) build() *Volume { return b.v }
