package fencing

import (
	"encoding/json"
	"fmt"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// Record is a fenced detach decision saved on a VolumeAttachment (annotation
// names.FenceRecordAnnotation) before the first fenced
// ControllerUnpublishVolume. It is never removed: every later attempt for
// that VolumeAttachment, by this process or another, is fenced too.
type Record struct {
	// Reason is why the node was cut off when the decision was taken.
	Reason cutoff.Reason `json:"reason"`
	// NodeID is the CSI node ID the fence targets.
	NodeID string `json:"nodeID"`
	// Since is when the decision was taken (RFC 3339, UTC).
	Since string `json:"since,omitempty"`
}

// ReasonUnreadableRecord is the reason given to a fence record that cannot
// be parsed: someone edited it, and the safe reading is that a fence was
// decided.
const ReasonUnreadableRecord cutoff.Reason = "unreadable-record"

// NewRecord returns the record of a fenced decision taken at now.
func NewRecord(reason cutoff.Reason, nodeID string, now time.Time) Record {
	return Record{Reason: reason, NodeID: nodeID, Since: now.UTC().Format(time.RFC3339)}
}

// Encode returns the annotation value of r.
func (r Record) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings always marshals
	return string(b)
}

// RecordOf returns the fence record saved on va, or nil when there is none.
// A record that cannot be parsed still counts as a fence (reason
// ReasonUnreadableRecord, no node ID) and err says why, so that an edited
// annotation can never make a detach less safe.
func RecordOf(va *storagev1.VolumeAttachment) (*Record, error) {
	raw, ok := va.Annotations[names.FenceRecordAnnotation]
	if !ok {
		return nil, nil
	}
	var r Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Reason == "" {
		if err == nil {
			err = fmt.Errorf("no reason")
		}
		return &Record{Reason: ReasonUnreadableRecord}, fmt.Errorf("annotation %s=%q is not a fence record: %w", names.FenceRecordAnnotation, raw, err)
	}
	return &r, nil
}
