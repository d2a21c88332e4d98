package fencing

import (
	"testing"

	"fenceline.io/fenceline/pkg/cutoff"
)

func TestRecordAhead(t *testing.T) {
	intent := &Record{Version: cutoff.RecordVersion, Reason: cutoff.ReasonFenced, By: cutoff.ByControllerPrefix + "node-fencing"}
	fenced := Decision{Action: ActionFenced, Reason: cutoff.ReasonFenced, WriteRecord: true}
	recorded := Decision{Action: ActionFenced, Reason: cutoff.ReasonFenced}
	tests := []struct {
		name string
		in   AheadInput
		want bool
	}{
		{"intent on an attached VolumeAttachment of a driver that can fence: record now", AheadInput{OurFinalizer: true, Intent: intent, Decision: fenced}, true},
		{"being deleted: the detach records", AheadInput{Deleting: true, OurFinalizer: true, Intent: intent, Decision: fenced}, false},
		{"no finalizer of ours: no detach of ours to record", AheadInput{Intent: intent, Decision: fenced}, false},
		{"no intent: the node may still change, the detach decides", AheadInput{OurFinalizer: true, Decision: fenced}, false},
		{"already recorded", AheadInput{OurFinalizer: true, Intent: intent, Decision: recorded}, false},
		{"driver cannot fence: plain with a warning, nothing to record", AheadInput{OurFinalizer: true, Intent: intent,
			Decision: Decision{Action: ActionPlain, Reason: cutoff.ReasonFenced, Unsupported: true}}, false},
		// Decide's own outcomes: an intent decides a detach fenced on a node
		// that looks healthy, from the cache alone.
		{"Decide: intent, healthy node, cached", AheadInput{OurFinalizer: true, Intent: intent,
			Decision: Decide(Input{Intent: intent, Node: node(), DriverCanFence: true})}, true},
		{"Decide: intent, driver cannot fence", AheadInput{OurFinalizer: true, Intent: intent,
			Decision: Decide(Input{Intent: intent, Node: node()})}, false},
		{"Decide: intent and a record", AheadInput{OurFinalizer: true, Intent: intent,
			Decision: Decide(Input{Record: intent, Intent: intent, Node: node(), DriverCanFence: true})}, false},
		{"refused", AheadInput{OurFinalizer: true, Intent: intent, Decision: Decision{Action: ActionRefuse, Reason: cutoff.ReasonSafeDetach}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RecordAhead(tt.in); got != tt.want {
				t.Errorf("RecordAhead(%+v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
