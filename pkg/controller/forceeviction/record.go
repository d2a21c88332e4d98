package forceeviction

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/names"
)

// EvictedVolumesAnnotation records, on the node, the PersistentVolumes of
// the pods force eviction deleted: comma-separated PV names, "*" when a
// volume could not be resolved (then every VolumeAttachment of the node
// counts). It is written before the first of those pods is deleted, so that
// a restart never forgets which detaches the taint must wait for when the
// kubelet comes back mid-eviction.
const EvictedVolumesAnnotation = names.Domain + "/force-evicted-volumes"

// allVolumes in the record stands for "could not tell which".
const allVolumes = "*"

// Evicted is the parsed record of EvictedVolumesAnnotation.
type Evicted struct {
	// Present says the eviction started (the annotation exists).
	Present bool
	// PVs are the recorded PersistentVolume names.
	PVs []string
	// All says a volume could not be resolved: every VolumeAttachment of
	// the node counts as an evicted pod's.
	All bool
}

// ParseEvicted reads the record from the node.
func ParseEvicted(node *v1.Node) Evicted {
	raw, ok := node.Annotations[EvictedVolumesAnnotation]
	if !ok {
		return Evicted{}
	}
	e := Evicted{Present: true}
	for _, pv := range strings.Split(raw, ",") {
		switch pv {
		case "":
		case allVolumes:
			e.All = true
		default:
			e.PVs = append(e.PVs, pv)
		}
	}
	return e
}

// With returns the record plus the PVs (and "all" when all is true), and
// whether that adds anything.
func (e Evicted) With(pvs []string, all bool) (Evicted, bool) {
	out := Evicted{Present: true, PVs: slices.Clone(e.PVs), All: e.All || all}
	for _, pv := range pvs {
		if !slices.Contains(out.PVs, pv) {
			out.PVs = append(out.PVs, pv)
		}
	}
	slices.Sort(out.PVs)
	return out, !e.Present || out.All != e.All || len(out.PVs) != len(e.PVs)
}

// String is the annotation value.
func (e Evicted) String() string {
	parts := slices.Clone(e.PVs)
	if e.All {
		parts = append(parts, allVolumes)
	}
	return strings.Join(parts, ",")
}

// EvictedVAs counts the VolumeAttachments that belong to the recorded
// volumes: the detaches a returning kubelet's node keeps the taint for.
// livePVs are the PVs of pods still on the node and not force-deleted: the
// record is written before the deletions, and a pod whose deletion the
// write-time re-check stopped (its kubelet came back) was not evicted, so
// its volume does not hold the taint.
func EvictedVAs(vas []*storagev1.VolumeAttachment, e Evicted, livePVs map[string]bool) int {
	if !e.Present {
		return 0
	}
	n := 0
	for _, va := range vas {
		pv := va.Spec.Source.PersistentVolumeName
		switch {
		case pv == nil:
			n++ // cannot be matched to a pod: counts
		case livePVs[*pv]:
		case e.All || slices.Contains(e.PVs, *pv):
			n++
		}
	}
	return n
}
