package controller

import (
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	k8stesting "k8s.io/client-go/testing"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// TestRecordAheadOfTheDetach: a controller's fence intent on an attachment
// of ours gets the attacher's record at its next sync, before any detach
// is asked for, where the driver can fence and our finalizer is on it.
func TestRecordAheadOfTheDetach(t *testing.T) {
	tests := []struct {
		name       string
		opts       envOptions
		edit       func(*storagev1.VolumeAttachment)
		wantRecord bool
	}{
		{"intent: recorded ahead", envOptions{}, withIntent(cutoff.ReasonFenced), true},
		{"no intent: nothing recorded", envOptions{}, func(*storagev1.VolumeAttachment) {}, false},
		{"driver cannot fence: nothing recorded", envOptions{noFence: true}, withIntent(cutoff.ReasonFenced), false},
		{"blind, intent: recorded ahead", envOptions{blind: true}, withIntent(cutoff.ReasonFenced), true},
		{"our finalizer gone: nothing recorded", envOptions{}, func(va *storagev1.VolumeAttachment) {
			withIntent(cutoff.ReasonFenced)(va)
			va.Finalizers = slices.DeleteFunc(va.Finalizers, func(f string) bool { return f == testFinalizer })
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.opts, append(withCSINode(), testobj.Node(testNode))...)
			e.attached()
			e.updateVA("va-1", tt.edit)
			if err := e.sync("va-1"); err != nil {
				t.Fatalf("sync: %v", err)
			}
			va := e.va("va-1")
			rec, err := fencing.RecordOf(va)
			if err != nil {
				t.Fatalf("record: %v", err)
			}
			if got := rec != nil; got != tt.wantRecord {
				t.Fatalf("record = %+v, want one: %v", rec, tt.wantRecord)
			}
			if rec != nil && (rec.Reason != cutoff.ReasonFenced || rec.NodeID != testNode || rec.By != cutoff.ByAttacher) {
				t.Errorf("record = %+v, want the intent's reason, node ID %s, by the attacher", rec, testNode)
			}
			if n := len(e.audit("ControllerUnpublishVolume")); n != 0 {
				t.Errorf("ControllerUnpublishVolume calls = %d before any detach, want 0", n)
			}
			if !va.Status.Attached || va.DeletionTimestamp != nil {
				t.Errorf("the attachment changed: deleted %v, status %+v", va.DeletionTimestamp, va.Status)
			}
		})
	}
}

// TestDetachFindsTheRecordAhead: the detach of an attachment recorded ahead
// is fenced, to the recorded node ID, with no write before its call: the
// round trip the record ahead saves.
func TestDetachFindsTheRecordAhead(t *testing.T) {
	e := newEnv(t, envOptions{}, append(withCSINode(), testobj.Node(testNode))...)
	volumeID := e.attached()
	e.updateVA("va-1", func(va *storagev1.VolumeAttachment) {
		va.Annotations[names.FenceIntentAnnotation] = cutoff.NewRecord(cutoff.ReasonFenced, "old-id", cutoff.ByControllerPrefix+"node-fencing", testobj.Epoch).Encode()
	})
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	ahead := e.va("va-1").Annotations[names.FenceRecordAnnotation]
	if ahead == "" {
		t.Fatal("no record written ahead of the detach")
	}
	e.markDeleting("va-1")
	before := len(e.client.Actions())
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	calls := e.audit("ControllerUnpublishVolume")
	if len(calls) != 1 || !calls[0].Fence || calls[0].NodeID != "old-id" || calls[0].VolumeID != volumeID {
		t.Errorf("ControllerUnpublishVolume calls = %+v, want one fenced of %s from old-id", calls, volumeID)
	}
	for _, a := range e.client.Actions()[before:] {
		p, ok := a.(k8stesting.PatchAction)
		if ok && strings.Contains(string(p.GetPatch()), names.FenceRecordAnnotation) {
			t.Errorf("the detach wrote the record again: %s", p.GetPatch())
		}
	}
	if got := e.va("va-1").Annotations[names.FenceRecordAnnotation]; got != ahead {
		t.Errorf("record after the detach = %s, want the one written ahead %s", got, ahead)
	}
}
