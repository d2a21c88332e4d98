package fencing

import (
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// Record is a fence decision or intent saved on a VolumeAttachment: the one
// versioned record type of pkg/cutoff. The attacher's own decision
// (names.FenceRecordAnnotation) is written before the first fenced
// ControllerUnpublishVolume and never removed: every later attempt for that
// VolumeAttachment, by this process or another, is fenced too.
type Record = cutoff.Record

// ReasonUnreadableRecord is the reason given to a record that cannot be
// parsed: someone edited it, and the safe reading is that a fence was
// decided.
const ReasonUnreadableRecord = cutoff.ReasonUnreadable

// NewRecord returns the attacher's record of a fenced decision taken at now.
func NewRecord(reason cutoff.Reason, nodeID string, now time.Time) Record {
	return cutoff.NewRecord(reason, nodeID, cutoff.ByAttacher, now)
}

// RecordOf returns the attacher's fence record saved on va, or nil when
// there is none. A record that cannot be parsed still counts as a fence
// (reason ReasonUnreadableRecord, no node ID) and err says why, so that an
// edited annotation can never make a detach less safe.
func RecordOf(va *storagev1.VolumeAttachment) (*Record, error) {
	return cutoff.RecordOn(va, names.FenceRecordAnnotation)
}
