package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// TestRemovedFenceIsWrittenBack: a controller's intent is on the VA, then a
// third party removes it while the node looks healthy. The attacher saw it,
// so it writes it back before deciding, says so, and fences.
func TestRemovedFenceIsWrittenBack(t *testing.T) {
	e := newEnv(t, envOptions{}, append(withCSINode(), testobj.Node(testNode))...)
	volumeID := e.attached()
	e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
	e.updateVA("va-1", withIntent(cutoff.ReasonSafeDetach))
	e.waitCached("va-1")
	e.updateVA("va-1", func(va *storagev1.VolumeAttachment) { delete(va.Annotations, names.FenceIntentAnnotation) })
	e.waitCached("va-1")
	e.markDeleting("va-1")
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	calls := audit.Filter(e.audit("ControllerUnpublishVolume"), audit.Volume(volumeID))
	if len(calls) != 1 || !calls[0].Fence || calls[0].Code != "OK" {
		t.Fatalf("unpublish calls %+v, want one fenced", calls)
	}
	got, err := cutoff.IntentOf(e.va("va-1"))
	if err != nil || got == nil || got.Reason != cutoff.ReasonSafeDetach {
		t.Errorf("intent after the sync = %+v, %v; want the removed one written back", got, err)
	}
	if evs := e.events(); !slices.ContainsFunc(evs, func(s string) bool { return strings.HasPrefix(s, "Warning "+EventFenceRecordRestored) }) {
		t.Errorf("events %q lack a %s warning", evs, EventFenceRecordRestored)
	}
}

// TestRemovedIntentOnAnAttachmentIsWrittenBack: an intent removed from an
// attachment that is not being detached (the node came back) is written
// back at the next sync, with the Event, without waiting for a detach: the
// next attacher process must find it when the detach comes.
func TestRemovedIntentOnAnAttachmentIsWrittenBack(t *testing.T) {
	e := newEnv(t, envOptions{}, append(withCSINode(), testobj.Node(testNode))...)
	e.attached()
	e.updateVA("va-1", withIntent(cutoff.ReasonOutOfService))
	e.waitCached("va-1")
	e.updateVA("va-1", func(va *storagev1.VolumeAttachment) { delete(va.Annotations, names.FenceIntentAnnotation) })
	e.waitCached("va-1")
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	got, err := cutoff.IntentOf(e.va("va-1"))
	if err != nil || got == nil || got.Reason != cutoff.ReasonOutOfService {
		t.Errorf("intent after the sync = %+v, %v; want the removed one written back", got, err)
	}
	if evs := e.events(); !slices.ContainsFunc(evs, func(s string) bool { return strings.HasPrefix(s, "Warning "+EventFenceRecordRestored) }) {
		t.Errorf("events %q lack a %s warning", evs, EventFenceRecordRestored)
	}
	if !e.va("va-1").Status.Attached || e.va("va-1").DeletionTimestamp != nil {
		t.Errorf("the attachment changed: %+v", e.va("va-1").Status)
	}
}

// TestFenceAnnotationEditDoesNotRequeue: an update that only writes a fence
// record does not queue the VA; a controller's intent on an attachment of
// ours does (its record is written ahead of the detach), and so does the
// removal of either (to write it back).
func TestFenceAnnotationEditDoesNotRequeue(t *testing.T) {
	e := newEnv(t, envOptions{}, append(withCSINode(), testobj.Node(testNode))...)
	e.attached()
	e.waitCached("va-1")
	old := e.va("va-1")
	e.ctrl.vaQueue.Drain()
	next := func(va *storagev1.VolumeAttachment, rv string, edit func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		out := va.DeepCopy()
		edit(out)
		out.ResourceVersion = rv
		return out
	}
	withIntentVA := next(old, "2", withIntent(cutoff.ReasonOutOfService))
	e.ctrl.vaUpdated(old, withIntentVA)
	if n := e.ctrl.vaQueue.Len(); n != 1 {
		t.Errorf("queue length %d after an intent was written, want 1 (to record ahead)", n)
	}
	e.ctrl.vaQueue.Drain()
	recorded := next(withIntentVA, "3", func(va *storagev1.VolumeAttachment) {
		va.Annotations[names.FenceRecordAnnotation] = fencing.NewRecord(cutoff.ReasonOutOfService, testNode, testobj.Epoch).Encode()
	})
	e.ctrl.vaUpdated(withIntentVA, recorded)
	if n := e.ctrl.vaQueue.Len(); n != 0 {
		t.Errorf("queue length %d after a record was written, want 0", n)
	}
	removed := next(recorded, "4", func(va *storagev1.VolumeAttachment) { delete(va.Annotations, names.FenceIntentAnnotation) })
	e.ctrl.vaUpdated(recorded, removed)
	if n := e.ctrl.vaQueue.Len(); n != 1 {
		t.Errorf("queue length %d after an intent was removed, want 1 (to write it back)", n)
	}
}

// TestPublishHeldForPendingDetach: a single-node volume's attach to node-2
// waits while its fenced detach from node-1 keeps failing, even after
// node-1's Node object is deleted, and goes once that detach is done.
func TestPublishHeldForPendingDetach(t *testing.T) {
	const node2 = "node-2"
	e := newEnv(t, envOptions{otherNodes: []string{node2}}, append(withCSINode(), csiNodeFor(node2, node2),
		testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)), testobj.Node(node2))...)
	volumeID := e.attached()
	e.drv.Faults().Set([]faults.Fault{{Method: "ControllerUnpublishVolume", Code: codes.Unavailable, Count: 1000}})
	e.markDeleting("va-1")
	if err := e.sync("va-1"); err == nil {
		t.Fatalf("detach succeeded despite the driver's fault")
	}
	if err := e.client.CoreV1().Nodes().Delete(e.ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.create(vaFor("va-2", "pv-1", node2))
	e.waitCached("va-1")
	e.waitCached("va-2")
	err := e.sync("va-2")
	if err == nil || !strings.Contains(err.Error(), "va-1 (node "+testNode+")") {
		t.Fatalf("attach to %s: %v; want it held for va-1", node2, err)
	}
	if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.Node(node2))); n != 0 {
		t.Fatalf("%d publishes to %s while the fenced detach from %s is pending", n, node2, testNode)
	}
	if ae := e.va("va-2").Status.AttachError; ae == nil || !strings.Contains(ae.Message, "held") {
		t.Errorf("attachError = %+v, want the hold explained", ae)
	}
	if evs := e.events(); !slices.ContainsFunc(evs, func(s string) bool { return strings.HasPrefix(s, "Warning "+EventAttachHeld) }) {
		t.Errorf("events %q lack %s", evs, EventAttachHeld)
	}

	e.drv.Faults().Set(nil)
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if calls := audit.Filter(e.audit("ControllerUnpublishVolume"), audit.Volume(volumeID), audit.OK()); len(calls) != 1 || !calls[0].Fence {
		t.Fatalf("successful unpublishes %+v, want one fenced", calls)
	}
	// The attach goes once the cache shows the detach finished.
	err = wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return e.sync("va-2") == nil, nil
	})
	if err != nil {
		t.Fatalf("attach to %s still held after the detach finished", node2)
	}
	if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.Node(node2), audit.OK())); n != 1 {
		t.Errorf("%d successful publishes to %s, want 1", n, node2)
	}
}
