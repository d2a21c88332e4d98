package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
)

// drain empties the VA queue as a worker would, resetting backoff.
func (e *env) drain() {
	e.ctrl.vaQueue.Drain()
}

// TestNodeUpdateRequeuesFailingDetach: a plain detach keeps failing with
// backoff; the out-of-service taint arrives; the VA is re-queued at once with
// its backoff reset, and the next sync is fenced.
func TestNodeUpdateRequeuesFailingDetach(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode))
	volumeID := e.attached()
	e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
	e.markDeleting("va-1")
	if err := e.sync("va-1"); err == nil {
		t.Fatal("plain detach of a staged volume succeeded, want FailedPrecondition")
	}
	e.drain()
	e.ctrl.vaQueue.loops[laneDetach].AddRateLimited("va-1") // what the worker does after the failure
	e.ctrl.vaQueue.loops[laneDetach].AddRateLimited("va-1")
	if n := e.ctrl.vaQueue.NumRequeues("va-1"); n != 2 {
		t.Fatalf("requeues = %d, want 2", n)
	}

	e.updateNode(testNode, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return e.ctrl.vaQueue.loops[laneFailover].Len() == 1 && e.ctrl.vaQueue.NumRequeues("va-1") == 0, nil
	})
	if err != nil {
		t.Fatalf("VA not re-queued for failover with reset backoff after the taint: failover lane len=%d requeues=%d", e.ctrl.vaQueue.loops[laneFailover].Len(), e.ctrl.vaQueue.NumRequeues("va-1"))
	}
	e.waitNodeCached(testNode)
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("sync after taint: %v", err)
	}
	calls := audit.Filter(e.audit("ControllerUnpublishVolume"), audit.Volume(volumeID))
	if len(calls) != 2 || calls[0].Fence || calls[0].Code != "FailedPrecondition" || !calls[1].Fence || calls[1].Code != "OK" {
		t.Errorf("unpublish calls = %+v, want a refused plain one, then a fenced OK", calls)
	}
}

// TestNodeUpdateWithoutDecisionChangeDoesNotRequeue: heartbeats must not
// bypass the backoff of a failing detach.
func TestNodeUpdateWithoutDecisionChangeDoesNotRequeue(t *testing.T) {
	// A deleting VA on a second node serves as a barrier: the node handler
	// sees updates in order, so once a taint on node-2 has reset va-2's
	// backoff, the heartbeat on testNode has been handled too. The check
	// looks at backoff counters, not at the queue contents, because late
	// VA events for va-1 may still add it (without resetting its backoff).
	barrierVA := vaFor("va-2", "pv-2", "node-2")
	barrierVA.Finalizers = []string{testFinalizer}
	barrierVA.DeletionTimestamp = ptr.To(metav1.Now())
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode),
		testobj.Node("node-2"), barrierVA)
	e.attached()
	e.markDeleting("va-1")
	e.waitCached("va-1")
	e.ctrl.vaQueue.loops[laneDetach].AddRateLimited("va-1") // two failed detaches
	e.ctrl.vaQueue.loops[laneDetach].AddRateLimited("va-1")
	e.ctrl.vaQueue.loops[laneDetach].AddRateLimited("va-2")
	e.updateNode(testNode, func(n *v1.Node) { n.Labels = map[string]string{"heartbeat": "1"} })
	e.updateNode("node-2", testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return e.ctrl.vaQueue.NumRequeues("va-2") == 0, nil
	})
	if err != nil {
		t.Fatalf("barrier VA's backoff not reset after tainting node-2: %v", err)
	}
	if n := e.ctrl.vaQueue.NumRequeues("va-1"); n != 2 {
		t.Errorf("va-1 requeues = %d after a heartbeat, want 2 (backoff kept)", n)
	}
}

// TestTrackerSupersede: after our write replaced version 1 by 2, a sync
// that still sees version 1 in the cache is skipped (it would unpublish or
// publish a second time); version 2 or later is acted on.
func TestTrackerSupersede(t *testing.T) {
	tests := []struct {
		name         string
		oldRV, newRV string
		cachedRV     string
		wantStale    bool
	}{
		{"cache still has the replaced version", "1", "2", "1", true},
		{"cache caught up", "1", "2", "2", false},
		{"cache moved past our write", "1", "2", "3", false},
		{"no-op write marks nothing", "1", "1", "1", false},
	}
	t.Run("finalizer removal that deleted the object marks the cached version", func(t *testing.T) {
		tr := newTracker()
		tr.markStale("va-1", "7") // the API answered with version 7 again
		va := vaFor("va-1", "pv", testNode)
		va.ResourceVersion = "7"
		if !tr.isStale(va) {
			t.Error("version 7 not reported stale")
		}
	})
	t.Run("two writes in one sync mark both replaced versions", func(t *testing.T) {
		tr := newTracker()
		tr.supersede("va-1", "1", "2") // finalizer + annotation
		tr.supersede("va-1", "2", "3") // status
		for _, rv := range []string{"1", "2"} {
			va := vaFor("va-1", "pv", testNode)
			va.ResourceVersion = rv
			if !tr.isStale(va) {
				t.Errorf("version %s not reported stale", rv)
			}
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker()
			tr.supersede("va-1", tc.oldRV, tc.newRV)
			va := vaFor("va-1", "pv", testNode)
			va.ResourceVersion = tc.cachedRV
			if got := tr.isStale(va); got != tc.wantStale {
				t.Errorf("isStale = %v, want %v", got, tc.wantStale)
			}
			// Once the cache caught up the mark is gone for good.
			va.ResourceVersion = tc.newRV
			if tr.isStale(va) {
				t.Errorf("version %s reported stale", tc.newRV)
			}
		})
	}
}

// TestFenceUnsupportedOncePerVA: retries do not repeat the warning.
func TestFenceUnsupportedOncePerVA(t *testing.T) {
	e := newEnv(t, envOptions{noFence: true}, csiNodeFor(testNode, testNode),
		testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)))
	volumeID := e.attached()
	e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
	e.markDeleting("va-1")
	for i := range 3 {
		if err := e.sync("va-1"); err == nil {
			t.Fatalf("sync %d succeeded; the strict driver must refuse a plain unpublish of a staged volume", i)
		}
	}
	got := e.events()
	if n := countOf(got, "Warning FenceUnsupported"); n != 1 {
		t.Errorf("FenceUnsupported events = %d in %q, want 1", n, got)
	}
	if n := countOf(got, "Warning DetachFailed"); n != 3 {
		t.Errorf("DetachFailed events = %d in %q, want 3", n, got)
	}
	if va := e.va("va-1"); !slices.Contains(va.Finalizers, testFinalizer) {
		t.Errorf("finalizer dropped: %v", va.Finalizers)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func TestSyncPV(t *testing.T) {
	tests := []struct {
		name          string
		deleting      bool
		withVA        bool
		wantFinalizer bool
	}{
		{"deleted PV without VAs loses the finalizer", true, false, false},
		{"deleted PV still used by a VA keeps it", true, true, true},
		{"live PV keeps it", false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			pv := pvFor("pv-1", "vol")
			pv.Finalizers = []string{testFinalizer, "kubernetes.io/pv-protection"}
			if tc.deleting {
				pv.DeletionTimestamp = ptr.To(metav1.Now())
			}
			e.create(pv)
			if tc.withVA {
				e.create(vaFor("va-1", "pv-1", testNode))
				e.waitCached("va-1")
			}
			if err := e.ctrl.syncPV(e.ctx, "pv-1"); err != nil {
				t.Fatalf("syncPV: %v", err)
			}
			got := e.pv("pv-1").Finalizers
			if slices.Contains(got, testFinalizer) != tc.wantFinalizer {
				t.Errorf("finalizers = %v, want ours present=%v", got, tc.wantFinalizer)
			}
			if !slices.Contains(got, "kubernetes.io/pv-protection") {
				t.Errorf("other finalizer lost: %v", got)
			}
		})
	}
}

// TestReconcileRepublishesLostAttachment: the driver forgot an attachment
// the API says exists; the reconciler forces a new ControllerPublishVolume.
func TestReconcileRepublishesLostAttachment(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode))
	volumeID := e.attached()
	// Unpublish behind the attacher's back.
	if err := e.ctrl.cfg.CSI.Unpublish(e.ctx, volumeID, testNode, nil, false); err != nil {
		t.Fatal(err)
	}
	e.waitCached("va-1")
	e.drain()
	e.ctrl.reconcile(e.ctx)
	if e.ctrl.vaQueue.Len() != 1 || !e.ctrl.track.isForceAttach("va-1") {
		t.Fatalf("reconciler did not queue the lost attachment")
	}
	if err := e.ctrl.syncVA(e.ctx, "va-1"); err != nil {
		t.Fatalf("forced attach: %v", err)
	}
	if n := len(audit.Filter(e.audit("ControllerPublishVolume"), audit.OK(), audit.Volume(volumeID))); n != 2 {
		t.Errorf("ControllerPublishVolume OK calls = %d, want 2 (attach and repair)", n)
	}
	if e.ctrl.track.isForceAttach("va-1") {
		t.Fatal("force-attach mark not cleared by the successful publish")
	}
	e.ctrl.reconcile(e.ctx)
	if e.ctrl.track.isForceAttach("va-1") {
		t.Errorf("reconciler marked a consistent attachment for repair")
	}
}

// TestPVArrivalRequeuesWaitingAttach: a VA created before its PV fails to
// attach; the PV's arrival re-queues it at once with its backoff reset.
func TestPVArrivalRequeuesWaitingAttach(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode))
	volumeID := e.createVolume("vol-1")
	e.create(vaFor("va-1", "pv-1", testNode))
	if err := e.sync("va-1"); err == nil {
		t.Fatal("attach without a PV succeeded")
	}
	e.waitCached("va-1") // with the attachError
	e.drain()
	e.ctrl.vaQueue.loops[laneAttach].AddRateLimited("va-1")
	e.create(pvFor("pv-1", volumeID))
	err := wait.PollUntilContextTimeout(e.ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return e.ctrl.vaQueue.Len() == 1 && e.ctrl.vaQueue.NumRequeues("va-1") == 0, nil
	})
	if err != nil {
		t.Fatalf("VA not re-queued when its PV arrived: len=%d requeues=%d", e.ctrl.vaQueue.Len(), e.ctrl.vaQueue.NumRequeues("va-1"))
	}
	if err := e.ctrl.syncVA(e.ctx, "va-1"); err != nil {
		t.Fatalf("attach after the PV arrived: %v", err)
	}
	if !e.va("va-1").Status.Attached {
		t.Error("VA not attached")
	}
}
