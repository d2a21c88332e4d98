package controller

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// TestFenceStaysAcrossRetries: the first fenced unpublish fails; by the
// retry the node is Ready again and untainted. The retry is still fenced,
// because the decision was recorded on the VolumeAttachment before the first
// call. Without the record it would be plain, and a real array would hand
// the volume over while the old node still has it.
func TestFenceStaysAcrossRetries(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)))
	volumeID := e.attached()
	e.stage(volumeID, e.va("va-1").Status.AttachmentMetadata)
	e.drv.Faults().Set([]faults.Fault{{Method: "ControllerUnpublishVolume", Code: codes.Unavailable, Count: 1}})
	e.markDeleting("va-1")
	if err := e.sync("va-1"); err == nil {
		t.Fatal("sync succeeded, want the injected UNAVAILABLE")
	}
	if got := recordReason(t, e.va("va-1")); got != cutoff.ReasonOutOfService {
		t.Fatalf("fence record after a failed fenced unpublish = %q, want %q", got, cutoff.ReasonOutOfService)
	}

	// The node comes back: Ready, taint removed (a partition that healed).
	e.updateNode(testNode, func(n *v1.Node) {
		n.Spec.Taints = nil
		testobj.ReadySince(time.Now())(n)
	})
	e.waitNodeCached(testNode)
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	calls := audit.Filter(e.audit("ControllerUnpublishVolume"), audit.Volume(volumeID))
	if len(calls) != 2 || !calls[0].Fence || calls[0].Code != "Unavailable" || !calls[1].Fence || calls[1].Code != "OK" {
		t.Errorf("unpublish calls = %+v, want a failed fenced one, then a fenced OK", calls)
	}
	if slices.Contains(e.va("va-1").Finalizers, testFinalizer) {
		t.Error("finalizer still present after the fenced retry succeeded")
	}
}

// TestPlainDetachConfirmedOnFreshData: the informer cache still shows the
// node healthy while the API server already has the out-of-service taint.
// The detach must read the node fresh and fence, never trust the lagging
// cache with a plain unpublish.
func TestPlainDetachConfirmedOnFreshData(t *testing.T) {
	healthy := testobj.Node(testNode)
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), healthy.DeepCopy())
	volumeID := e.attached()
	// The cache lags: freeze it at the healthy node.
	stale := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := stale.Add(healthy); err != nil {
		t.Fatal(err)
	}
	e.ctrl.nodeLister = corelisters.NewNodeLister(stale)
	e.updateNode(testNode, func(n *v1.Node) {
		testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)(n)
		unknown(n)
	})
	e.markDeleting("va-1")
	if err := e.sync("va-1"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	calls := audit.Filter(e.audit("ControllerUnpublishVolume"), audit.Volume(volumeID))
	if len(calls) != 1 || !calls[0].Fence {
		t.Fatalf("unpublish calls = %+v, want one fenced", calls)
	}
	if got := recordReason(t, e.va("va-1")); got != cutoff.ReasonOutOfService {
		t.Errorf("fence record = %q, want %q", got, cutoff.ReasonOutOfService)
	}
}

func TestReasonAppeared(t *testing.T) {
	healthy := testobj.Node(testNode)
	down := testobj.Node(testNode, unknown)
	oos := testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	quarantined := testobj.Node(testNode, notReady, testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule))
	tests := []struct {
		name     string
		old, new *v1.Node
		safe     bool
		want     bool
	}{
		{"heartbeat", healthy, healthy, false, false},
		{"node goes NotReady", healthy, down, false, false},
		{"out-of-service taint added", down, oos, false, true},
		{"out-of-service taint removed", oos, down, false, false},
		{"node Ready again", oos, healthy, false, false},
		{"quarantined, safe-detach driver", down, quarantined, true, true},
		{"quarantined, driver not opted in", down, quarantined, false, false},
		{"safe-detach becomes out-of-service", quarantined, func() *v1.Node {
			n := quarantined.DeepCopy()
			testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)(n)
			return n
		}(), true, true},
	}
	for _, tc := range tests {
		if got := reasonAppeared(tc.old, tc.new, tc.safe); got != tc.want {
			t.Errorf("%s: reasonAppeared() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
