package nodefencing

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

// ask annotates the node's request as kubectl fenceline unfence does.
func (e *env) ask(node, verified string) {
	e.t.Helper()
	r := e.request(node)
	testobj.UnfenceAsked("user:ada", verified)(r)
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().Update(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// failedGauge is fenceline_node_fencing_failed of the node, 0 without a
// series.
func (e *env) failedGauge(node string) float64 {
	if testutil.CollectAndCount(e.Metrics.FencingFailed) == 0 {
		return 0
	}
	return testutil.ToFloat64(e.Metrics.FencingFailed.WithLabelValues(node))
}

// failToFailed drives n1 from no request to a Failed request.
func (e *env) failToFailed() {
	e.t.Helper()
	for range 3 {
		e.sync("n1") // Pending, Triaged, Fencing
	}
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) { s.FailedRounds = 5 })
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFailed)
}

// Under recovery.unfence Manual, the operator's ask is what unfences, and
// node-fencing makes every write.
func TestSyncManualUnfenceAsked(t *testing.T) {
	now := testobj.Epoch
	objs := cluster(now, nil)
	objs[0] = testobj.FencePolicy("p", testobj.ManualUnfence())
	e := newEnv(t, now, objs...)
	e.fenceToFenced()
	e.comesBack("boot-2")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.sync("n1")
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonManualUnfence)
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)

	e.ask("n1", "")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse, requiredCond: v1.ConditionFalse, completeCond: v1.ConditionFalse})
}

// An ask on a request not admitted yet cancels it; node-fencing clears the
// node's triage.
func TestSyncCancelAsked(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil, testobj.FencePolicy("p", testobj.ManualApproval()))[1:]...)
	e.sync("n1")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
	e.ask("n1", "")
	e.sync("n1")
	r := e.wantPhase("n1", fencingv1alpha1.FencingPhaseCancelled)
	if c := findCondition(r, fencingv1alpha1.FencingRequestTriaged); c == nil || c.Reason != ReasonUnfenceRequested {
		t.Errorf("Triaged condition = %+v, want reason %s", c, ReasonUnfenceRequested)
	}
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse})
}

// A manual request for a node labelled out of fencing waits until a human
// overrides the label on the request.
func TestSyncExcludedNodeNeedsOverride(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, []testobj.NodeOption{testobj.Label(detect.ExcludeLabel, "")},
		testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.Approved(true), testobj.InPhase("")))...)
	e.sync("n1")
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestTriaged, metav1.ConditionFalse, ReasonExcluded)
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: ""})

	r := e.request("n1")
	r.Annotations = map[string]string{names.OverrideExclusionAnnotation: "user:ada"}
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().Update(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Settle()
	e.sync("n1")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
}

// A Failed request's marks go by themselves when the node comes back with
// a new boot ID; the request then records it and no longer blocks.
func TestSyncFailedMarksClearedOnNewBoot(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.failToFailed()
	e.comesBack("boot-2")
	e.sync("n1")
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse, requiredCond: v1.ConditionFalse})
	r := e.wantPhase("n1", fencingv1alpha1.FencingPhaseFailed)
	if c := findCondition(r, fencingv1alpha1.FencingRequestRecovered); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Recovered condition of the Failed request = %+v, want True", c)
	}
	e.sync("n1")
	if got := e.failedGauge("n1"); got != 0 {
		t.Errorf("fencing failed gauge = %v after the node was cleared, want 0", got)
	}
}

// The story of the old runbook: the node returns with the same boot ID,
// the Failed request is deleted; the node stays unschedulable and the
// failure is still reported, until an operator who verified the machine
// asks on the node, and node-fencing clears it.
func TestSyncFailedMarksAfterTheRequestIsDeleted(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.failToFailed()
	e.comesBack("boot-1")
	e.sync("n1")
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonSameBootID)
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint)
	if got := e.failedGauge("n1"); got != 1 {
		t.Errorf("fencing failed gauge = %v, want 1", got)
	}

	if err := e.Fencing.FencingV1alpha1().FencingRequests().Delete(e.Ctx, e.request("n1").Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Settle()
	e.sync("n1")
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint)
	if got := e.failedGauge("n1"); got != 1 {
		t.Errorf("fencing failed gauge = %v after the request was deleted, want 1 while its marks stay", got)
	}

	e.updateNode("n1", testobj.NodeUnfenceAsked("user:ada", VerifiedRebooted))
	e.sync("n1")
	n := e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse, requiredCond: v1.ConditionFalse})
	if _, ok := n.Annotations[names.UnfenceAnnotation]; ok {
		t.Errorf("the ask stays on the node after it was carried out: %v", n.Annotations)
	}
	e.sync("n1")
	if got := e.failedGauge("n1"); got != 0 {
		t.Errorf("fencing failed gauge = %v after the node was cleared, want 0", got)
	}
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Errorf("a healthy cleared node got %d new requests", len(rs))
	}
}

// Clearing re-decides at write time: a node that went down again between
// the decision and the write keeps its marks.
func TestSyncClearRechecksTheNode(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.failToFailed()
	e.comesBack("boot-2")
	in, err := e.c.gather("n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := Decide(in)
	if d.Step != StepClear {
		t.Fatalf("Decide = %+v, want Clear", d)
	}
	e.updateNode("n1", func(n *v1.Node) {
		n.Status.Conditions = testobj.Node("n1", testobj.UnknownSince(e.Clock.Now())).Status.Conditions
	})
	if _, err := e.c.act(e.Ctx, in, d); err == nil {
		t.Error("clear on a node that went down since the decision: no error, want the decision changed")
	}
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint)
}

func findCondition(r *fencingv1alpha1.FencingRequest, typ string) *metav1.Condition {
	for i := range r.Status.Conditions {
		if r.Status.Conditions[i].Type == typ {
			return &r.Status.Conditions[i]
		}
	}
	return nil
}

// An operator's ask on a Node is an update node-fencing looks at; another
// annotation is not.
func TestNodeChangedByAnAsk(t *testing.T) {
	base := testobj.Node("n1")
	for _, tc := range []struct {
		name string
		cur  *v1.Node
		want bool
	}{
		{"unfence ask added", testobj.Node("n1", testobj.NodeUnfenceAsked("user:ada", "")), true},
		{"verification added to the ask", testobj.Node("n1", testobj.NodeUnfenceAsked("user:ada", VerifiedRebooted)), true},
		{"another annotation", testobj.Node("n1", testobj.Annotation("example.com/x", "y")), false},
	} {
		old := base
		if tc.name == "verification added to the ask" {
			old = testobj.Node("n1", testobj.NodeUnfenceAsked("user:ada", ""))
		}
		if got := nodeChanged(old, tc.cur); got != tc.want {
			t.Errorf("%s: nodeChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}
