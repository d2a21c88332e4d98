package cutoff

import (
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// TestRecordEncodingGolden pins the encoded form: attachers and controllers
// of different versions read each other's records, so a change here is a
// wire change and needs a new RecordVersion.
func TestRecordEncodingGolden(t *testing.T) {
	at := time.Date(2026, 11, 28, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		rec  Record
		want string
	}{
		{"attacher", NewRecord(ReasonSafeDetach, "iqn.2026-11.io.example:node-a", ByAttacher, at),
			`{"v":1,"reason":"safe-detach","nodeID":"iqn.2026-11.io.example:node-a","by":"fenceline-attacher","since":"2026-11-28T08:30:00Z"}`},
		{"controller intent without node ID", NewRecord(ReasonOutOfService, "", ByControllerPrefix+"podgc", at),
			`{"v":1,"reason":"out-of-service","by":"fenceline-controller/podgc","since":"2026-11-28T08:30:00Z"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rec.Encode(); got != tc.want {
				t.Errorf("Encode() =\n%s\nwant\n%s", got, tc.want)
			}
			back, err := DecodeRecord(tc.want)
			if err != nil || back != tc.rec {
				t.Errorf("DecodeRecord(golden) = %+v, %v; want %+v", back, err, tc.rec)
			}
		})
	}
}

func TestDecodeRecord(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    Record
		wantErr string
	}{
		{"version 0 attacher record", `{"reason":"out-of-service","nodeID":"n1","since":"2026-01-01T00:00:00Z"}`,
			Record{Reason: ReasonOutOfService, NodeID: "n1", Since: "2026-01-01T00:00:00Z"}, ""},
		{"not JSON", `fenced`, Record{Reason: ReasonUnreadable}, "not a fence record"},
		{"no reason", `{"by":"someone"}`, Record{Reason: ReasonUnreadable, By: "someone"}, "no reason"},
		{"newer version: a fence, without its node ID", `{"v":9,"reason":"x","nodeID":"n1","by":"fenceline-attacher"}`,
			Record{Version: 9, Reason: ReasonUnreadable, By: ByAttacher}, "newer than"},
		{"unknown fields of the same version are ignored", `{"v":1,"reason":"fenced","extra":true}`, Record{Version: 1, Reason: ReasonFenced}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRecord(tc.raw)
			if got != tc.want {
				t.Errorf("DecodeRecord() = %+v, want %+v", got, tc.want)
			}
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("DecodeRecord() error = %v, want containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRecordOnAndWriter(t *testing.T) {
	va := testobj.VA("va", "drv", "pv", "node-1")
	if r, err := IntentOf(va); r != nil || err != nil {
		t.Fatalf("IntentOf(no annotation) = %v, %v; want nil, nil", r, err)
	}
	va.Annotations = map[string]string{names.FenceIntentAnnotation: "{", names.FenceRecordAnnotation: `{"reason":"fenced"}`}
	if r, err := IntentOf(va); r == nil || r.Reason != ReasonUnreadable || err == nil || !strings.Contains(err.Error(), names.FenceIntentAnnotation) {
		t.Errorf("IntentOf(unreadable) = %+v, %v; want an unreadable fence and an error naming the annotation", r, err)
	}
	r, err := RecordOn(va, names.FenceRecordAnnotation)
	if err != nil || r.Writer() != ByAttacher {
		t.Errorf("RecordOn(version 0).Writer() = %q, %v; want %q", r.Writer(), err, ByAttacher)
	}
}
