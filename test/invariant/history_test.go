package invariant

import (
	"slices"
	"testing"
)

func TestCheckHistory(t *testing.T) {
	tests := []struct {
		name      string
		h         *history
		multi     bool // the volume is not single-writer
		wantRules []Rule
		wantIndex []int
	}{
		{
			name: "fenced failover, then moved back after a clean unstage",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "OK", fenced).add("Write", "a", "PermissionDenied").
				add("ControllerPublishVolume", "b", "OK").add("NodeStageVolume", "b", "OK").add("Write", "b", "OK").
				add("NodeUnstageVolume", "a", "OK").add("NodeUnstageVolume", "b", "OK").add("ControllerUnpublishVolume", "b", "OK").
				add("ControllerPublishVolume", "a", "OK").add("NodeStageVolume", "a", "OK").add("Write", "a", "OK"),
		},
		{
			name: "graceful move: unstaged before a plain unpublish",
			h: runningOnA().add("NodeUnstageVolume", "a", "OK").add("ControllerUnpublishVolume", "a", "OK").
				add("ControllerPublishVolume", "b", "OK").add("Write", "b", "OK"),
		},
		{
			name: "plain unpublish of a staged volume and the zombie's write after the move",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "OK").
				add("ControllerPublishVolume", "b", "OK").add("Write", "b", "OK").add("Write", "a", "OK"),
			wantRules: []Rule{RuleFenceRequired, RuleTwoWriters},
			wantIndex: []int{4, 7},
		},
		{
			name:      "plain unpublish of every node (no node_id) while a stages it",
			h:         runningOnA().add("ControllerUnpublishVolume", "", "OK"),
			wantRules: []Rule{RuleFenceRequired},
			wantIndex: []int{4},
		},
		{
			name: "fenced unpublish of every node (no node_id)",
			h:    runningOnA().add("ControllerUnpublishVolume", "", "OK", fenced).add("ControllerPublishVolume", "b", "OK"),
		},
		{
			name: "published to b while a still has it",
			h: runningOnA().add("ControllerPublishVolume", "b", "OK").
				add("ControllerUnpublishVolume", "a", "OK", fenced),
			wantRules: []Rule{RuleUnpublishFirst},
			wantIndex: []int{4},
		},
		{
			name: "a lost answer counts: the unpublish took effect",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "DeadlineExceeded", fenced, applied).
				add("ControllerPublishVolume", "b", "OK"),
		},
		{
			name: "a failed unpublish does not count",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "Unavailable", fenced).
				add("ControllerPublishVolume", "b", "OK").add("Write", "a", "OK"),
			wantRules: []Rule{RuleUnpublishFirst, RuleTwoWriters},
			wantIndex: []int{5, 6},
		},
		{
			name: "a refused write is no writer",
			h: runningOnA().add("ControllerUnpublishVolume", "a", "OK", fenced).
				add("ControllerPublishVolume", "b", "OK").add("Write", "a", "PermissionDenied"),
		},
		{
			name: "another volume's records are judged on their own",
			h: runningOnA().add("ControllerPublishVolume", "b", "OK", otherVol).
				add("Write", "b", "OK", otherVol).add("Write", "a", "OK"),
		},
		{
			name:  "a multi-writer volume is not judged",
			h:     runningOnA().add("ControllerPublishVolume", "b", "OK").add("Write", "b", "OK").add("Write", "a", "OK"),
			multi: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckHistory(tt.h.recs, func(v string) bool { return !tt.multi })
			var rules []Rule
			var idx []int
			for _, v := range got {
				rules, idx = append(rules, v.Rule), append(idx, v.Index)
			}
			if !slices.Equal(rules, tt.wantRules) || !slices.Equal(idx, tt.wantIndex) {
				t.Errorf("CheckHistory = %v at %v, want %v at %v", rules, idx, tt.wantRules, tt.wantIndex)
			}
		})
	}
}
