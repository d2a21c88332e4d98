package cutoff

import (
	"encoding/json"
	"fmt"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/names"
)

// RecordVersion is the version of the encoded Record that this code writes.
// Version 0 is the attacher's original record, which had neither a version
// nor a writer; it decodes as a record written by fenceline-attacher.
const RecordVersion = 1

// Writers of records: the component (and, for fenceline-controller, the
// controller) that decided the fence.
const (
	// ByAttacher is fenceline-attacher deciding a fenced detach.
	ByAttacher = "fenceline-attacher"
	// ByControllerPrefix prefixes a fenceline-controller controller's name.
	ByControllerPrefix = "fenceline-controller/"
)

// ReasonUnreadable is the reason given to a record or intent that cannot be
// parsed: someone edited it, and the safe reading is that a fence was
// decided.
const ReasonUnreadable Reason = "unreadable-record"

// Record says that a detach must be fenced, and why. The same type is
// written in two places on a VolumeAttachment:
//
//   - names.FenceRecordAnnotation: fenceline-attacher's own decision, saved
//     before its first fenced ControllerUnpublishVolume. It is sticky: that
//     detach is never plain again, even if the driver stops advertising
//     UNPUBLISH_FENCE (then it is refused).
//   - names.FenceIntentAnnotation: the intent of whoever made the detach
//     inevitable (a force deletion, a release of volumesInUse, an
//     out-of-service taint), written before that write. The attacher reads
//     it as a reason to fence, whatever the Node looks like by then.
//
// Neither is ever removed by Fenceline; both go with the VolumeAttachment.
type Record struct {
	// Version is RecordVersion when written by this code (0: the original
	// attacher record).
	Version int `json:"v,omitempty"`
	// Reason is why the node was cut off when the decision was taken.
	Reason Reason `json:"reason"`
	// NodeID is the CSI node ID the fence targets; empty when the writer
	// did not know it (the attacher then uses the ID recorded at attach).
	NodeID string `json:"nodeID,omitempty"`
	// By is who decided: ByAttacher or ByControllerPrefix + a controller.
	By string `json:"by,omitempty"`
	// Since is when the decision was taken (RFC 3339, UTC), for humans.
	// No decision compares it with a clock.
	Since string `json:"since,omitempty"`
}

// NewRecord returns a record of the current version.
func NewRecord(reason Reason, nodeID, by string, now time.Time) Record {
	return Record{Version: RecordVersion, Reason: reason, NodeID: nodeID, By: by, Since: now.UTC().Format(time.RFC3339)}
}

// Encode returns the annotation value of r.
func (r Record) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings and an int always marshals
	return string(b)
}

// Writer returns who wrote the record; a version 0 record without a writer
// was written by fenceline-attacher, the only writer there was.
func (r Record) Writer() string {
	if r.By == "" {
		return ByAttacher
	}
	return r.By
}

// DecodeRecord parses an annotation value. A value that cannot be parsed,
// has no reason, or comes from a newer version than this code knows still
// counts as a fence (reason ReasonUnreadable, no node ID, the fields it could
// read kept) and err says why, so that an edited annotation or a downgrade
// can never make a detach less safe.
func DecodeRecord(raw string) (Record, error) {
	var r Record
	err := json.Unmarshal([]byte(raw), &r)
	switch {
	case err != nil:
		return Record{Reason: ReasonUnreadable}, fmt.Errorf("%q is not a fence record: %w", raw, err)
	case r.Reason == "":
		return Record{Reason: ReasonUnreadable, By: r.By}, fmt.Errorf("%q is not a fence record: no reason", raw)
	case r.Version > RecordVersion:
		return Record{Version: r.Version, Reason: ReasonUnreadable, By: r.By},
			fmt.Errorf("%q is a fence record of version %d, newer than %d: read as a fence without a node ID", raw, r.Version, RecordVersion)
	}
	return r, nil
}

// RecordOn returns the record saved under annotation key on va, nil when
// there is none. See DecodeRecord for unreadable values.
func RecordOn(va *storagev1.VolumeAttachment, key string) (*Record, error) {
	raw, ok := va.Annotations[key]
	if !ok {
		return nil, nil
	}
	r, err := DecodeRecord(raw)
	if err != nil {
		return &r, fmt.Errorf("annotation %s: %w", key, err)
	}
	return &r, nil
}

// IntentOf returns the fence intent a controller recorded on va, nil when
// there is none.
func IntentOf(va *storagev1.VolumeAttachment) (*Record, error) {
	return RecordOn(va, names.FenceIntentAnnotation)
}
