package controller

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// TestPendingDetaches: the pending-detach gauge lists only deleting VAs
// with our finalizer, with the mode the decision gives now (a recorded
// fence first), and the capability gauge follows discovery.
func TestPendingDetaches(t *testing.T) {
	e := newEnv(t, envOptions{}, csiNodeFor(testNode, testNode), testobj.Node(testNode, unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)))
	e.attached()
	e.waitCached("va-1")
	if got := e.ctrl.PendingDetaches(); len(got) != 0 {
		t.Fatalf("attached VA listed as pending detach: %+v", got)
	}
	e.markDeleting("va-1")
	e.waitCached("va-1")
	got := e.ctrl.PendingDetaches()
	if len(got) != 1 || got[0].Mode != "fenced" || got[0].Reason != string(cutoff.ReasonOutOfService) || got[0].Since.IsZero() {
		t.Fatalf("pending detaches = %+v, want one fenced out-of-service", got)
	}
	// A recorded fence wins over the node as it looks now.
	e.updateVA("va-1", withRecord(cutoff.ReasonSafeDetach, testNode))
	e.updateNode(testNode, func(n *v1.Node) { n.Spec.Taints = nil })
	e.waitCached("va-1")
	e.waitNodeCached(testNode)
	if got := e.ctrl.PendingDetaches(); len(got) != 1 || got[0].Mode != "fenced" || got[0].Reason != string(cutoff.ReasonSafeDetach) {
		t.Fatalf("pending detaches with a record = %+v, want fenced safe-detach", got)
	}
	var state metrics.State = e.ctrl
	if caps := state.FenceCapabilities(); !caps["UNPUBLISH_FENCE"] {
		t.Errorf("fence capabilities = %v, want UNPUBLISH_FENCE", caps)
	}
}
