package invariant

import (
	"slices"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

const vol = "vol-1"

// history builds an audit log one call a second; cut marks the cut-off.
type history struct {
	recs []audit.Record
	cut  time.Time
}

func (h *history) add(method, node, code string, mutate ...func(*audit.Record)) *history {
	r := audit.Record{Time: t0.Add(time.Duration(len(h.recs)) * time.Second), Method: method, VolumeID: vol, NodeID: node, Code: code}
	for _, m := range mutate {
		m(&r)
	}
	h.recs = append(h.recs, r)
	return h
}

func (h *history) cutOff() *history {
	h.cut = t0.Add(time.Duration(len(h.recs))*time.Second - time.Millisecond)
	return h
}

func fenced(r *audit.Record)   { r.Fence = true }
func applied(r *audit.Record)  { r.Applied = true }
func otherVol(r *audit.Record) { r.VolumeID = "vol-2" }

// runningOnA is the start of every story: the volume attached to, staged
// and written on node a.
func runningOnA() *history {
	h := &history{}
	return h.add("ControllerPublishVolume", "a", "OK").add("NodeStageVolume", "a", "OK").
		add("NodePublishVolume", "a", "OK").add("Write", "a", "OK")
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name        string
		h           *history
		wantRules   []Rule
		wantPublish int // -1: not moved
		wantUnpub   int
	}{
		{
			name: "fenced failover",
			h: runningOnA().cutOff().add("Write", "a", "OK").add("ControllerUnpublishVolume", "a", "OK", fenced).
				add("Write", "a", "PermissionDenied").add("ControllerPublishVolume", "b", "OK").add("Write", "b", "OK").add("Write", "a", "PermissionDenied"),
			wantPublish: 7, wantUnpub: 5,
		},
		{
			name: "plain unpublish where a fence was required (real array) and the zombie's writes",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK").
				add("ControllerPublishVolume", "b", "OK").add("Write", "a", "OK"),
			wantRules:   []Rule{RuleFenceRequired, RuleNoOldWrites},
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name: "publish before the unpublish",
			h: runningOnA().cutOff().add("ControllerPublishVolume", "b", "OK").
				add("ControllerUnpublishVolume", "a", "OK", fenced),
			wantRules:   []Rule{RuleUnpublishFirst},
			wantPublish: 4, wantUnpub: -1,
		},
		{
			name: "accepted write after the new publish",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK", fenced).
				add("ControllerPublishVolume", "b", "OK").add("Write", "a", "OK"),
			wantRules:   []Rule{RuleNoOldWrites},
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name: "plain unpublish after the publish to the new node",
			h: runningOnA().cutOff().add("ControllerPublishVolume", "b", "OK").
				add("ControllerUnpublishVolume", "a", "OK"),
			wantRules:   []Rule{RuleUnpublishFirst, RuleFenceRequired},
			wantPublish: 4, wantUnpub: -1,
		},
		{
			name: "plain unpublish with a lost answer still took effect",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "DeadlineExceeded", applied).
				add("ControllerPublishVolume", "b", "OK"),
			wantRules:   []Rule{RuleFenceRequired},
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name: "fenced unpublish with a lost answer is the unpublish",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "DeadlineExceeded", fenced, applied).
				add("ControllerPublishVolume", "b", "OK"),
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name: "refused plain unpublish (strict array) and a failed one are not judged",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "FailedPrecondition").
				add("ControllerUnpublishVolume", "a", "Unavailable").add("ControllerUnpublishVolume", "a", "OK", fenced).
				add("ControllerPublishVolume", "b", "OK"),
			wantPublish: 7, wantUnpub: 6,
		},
		{
			name: "plain unpublish after the node cleaned up (driver without fence)",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "FailedPrecondition").
				add("NodeUnpublishVolume", "a", "OK").add("NodeUnstageVolume", "a", "OK").
				add("ControllerUnpublishVolume", "a", "OK").add("ControllerPublishVolume", "b", "OK"),
			wantPublish: 8, wantUnpub: 7,
		},
		{
			name: "plain retry after the fence is harmless",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK", fenced).
				add("ControllerUnpublishVolume", "a", "OK").add("ControllerPublishVolume", "b", "OK"),
			wantPublish: 6, wantUnpub: 5,
		},
		{
			name: "unpublish without node_id counts for the cut-off node",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "", "OK").
				add("ControllerPublishVolume", "b", "OK"),
			wantRules:   []Rule{RuleFenceRequired},
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name: "graceful move before the cut-off is not judged",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "OK").cutOff().
				add("ControllerPublishVolume", "b", "OK"),
			wantPublish: 5, wantUnpub: 4,
		},
		{
			name:        "not moved yet",
			h:           runningOnA().cutOff().add("Write", "a", "OK").add("ControllerPublishVolume", "b", "FailedPrecondition"),
			wantPublish: -1, wantUnpub: -1,
		},
		{
			name: "other volumes are ignored",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK", otherVol).add("ControllerPublishVolume", "b", "OK", otherVol).
				add("ControllerUnpublishVolume", "a", "OK", fenced).add("ControllerPublishVolume", "b", "OK").add("Write", "a", "OK", otherVol),
			wantPublish: 7, wantUnpub: 6,
		},
		{
			name: "writes after the volume moved back are a new story",
			h: runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK", fenced).add("ControllerPublishVolume", "b", "OK").
				add("NodeUnstageVolume", "a", "OK").add("ControllerUnpublishVolume", "b", "OK").
				add("ControllerPublishVolume", "a", "OK").add("NodeStageVolume", "a", "OK").add("Write", "a", "OK"),
			wantPublish: 5, wantUnpub: 4,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.h.recs, Failover{Volume: vol, From: "a", CutOff: tc.h.cut})
			var got []Rule
			for _, v := range res.Violations {
				got = append(got, v.Rule)
			}
			if !slices.Equal(got, tc.wantRules) {
				t.Errorf("violations %v, want %v\n%v", got, tc.wantRules, res.Err())
			}
			if res.Publish != tc.wantPublish || res.Unpublish != tc.wantUnpub {
				t.Errorf("publish %d, unpublish %d; want %d, %d", res.Publish, res.Unpublish, tc.wantPublish, tc.wantUnpub)
			}
			if (res.Err() == nil) != (len(tc.wantRules) == 0) {
				t.Errorf("Err() = %v with violations %v", res.Err(), got)
			}
			if res.Moved() && res.NewNode != "b" {
				t.Errorf("new node %q, want b", res.NewNode)
			}
		})
	}
}

func TestErrNamesEveryViolation(t *testing.T) {
	h := runningOnA().cutOff().add("ControllerUnpublishVolume", "a", "OK").add("ControllerPublishVolume", "b", "OK").add("Write", "a", "OK")
	err := Check(h.recs, Failover{Volume: vol, From: "a", CutOff: h.cut}).Err()
	if err == nil {
		t.Fatal("no error for a corrupting failover")
	}
	for _, want := range []string{string(RuleFenceRequired), string(RuleNoOldWrites), "record 4", "record 6"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
