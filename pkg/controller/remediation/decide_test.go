package remediation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

type remOption func(*fencingv1alpha1.FencelineRemediation)

// remediation returns the remediation NodeHealthCheck creates for node
// w1, with Fenceline's finalizer.
func remediation(opts ...remOption) *fencingv1alpha1.FencelineRemediation {
	r := &fencingv1alpha1.FencelineRemediation{ObjectMeta: metav1.ObjectMeta{
		Name: "w1", Namespace: "fenceline", UID: types.UID("uid-rem-w1"),
		Finalizers: []string{Finalizer},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "uid-nhc",
		}},
	}}
	for _, o := range opts {
		o(r)
	}
	return r
}

func noFinalizer(r *fencingv1alpha1.FencelineRemediation) { r.Finalizers = nil }

func deleting(r *fencingv1alpha1.FencelineRemediation) {
	now := metav1.NewTime(testobj.Epoch)
	r.DeletionTimestamp = &now
}

func timedOut(r *fencingv1alpha1.FencelineRemediation) {
	metav1.SetMetaDataAnnotation(&r.ObjectMeta, TimedOutAnnotation, "2026-03-01T12:00:00Z")
}

// ownRequest is a request the remediation created, in phase p.
func ownRequest(p fencingv1alpha1.FencingPhase, opts ...testobj.RequestOption) *fencingv1alpha1.FencingRequest {
	r := remediation()
	own := func(req *fencingv1alpha1.FencingRequest) {
		req.Spec.Requester, req.Spec.Reason = Requester(r), ReasonExternalRemediation
		req.Labels = map[string]string{RemediationUIDLabel: string(r.UID), names.FencingRequestNodeLabel: "w1"}
	}
	return testobj.FencingRequest("w1", append([]testobj.RequestOption{testobj.InPhase(p), own}, opts...)...)
}

func askedToCancel(r *fencingv1alpha1.FencingRequest) {
	metav1.SetMetaDataAnnotation(&r.ObjectMeta, names.UnfenceAnnotation, "remediation:fenceline/w1")
}

func TestDecide(t *testing.T) {
	node := testobj.Node("w1")
	P := fencingv1alpha1.FencingPhasePending
	tests := []struct {
		name     string
		rem      *fencingv1alpha1.FencelineRemediation
		nodeName string
		node     *v1.Node
		requests []*fencingv1alpha1.FencingRequest
		want     Action
		follows  string
		why      string
	}{
		{name: "a new remediation records its finalizer first", rem: remediation(noFinalizer), nodeName: "w1", node: node, want: ActAddFinalizer},
		{name: "no request: create one", rem: remediation(), nodeName: "w1", node: node, want: ActCreate},
		{name: "node unknown (Machine without nodeRef): wait", rem: remediation(), want: ActNone, why: "not known"},
		{name: "no such Node: nothing is created", rem: remediation(), nodeName: "w1", want: ActNone, why: "no Node"},
		{name: "own request pending: follow it", rem: remediation(), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(P)}, want: ActNone, follows: "w1-req"},
		{name: "own request failed: never replaced", rem: remediation(), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseFailed)}, want: ActNone, follows: "w1-req"},
		{name: "another open request of the node: follow it, create none", rem: remediation(), nodeName: "w1", node: node,
			requests: []*fencingv1alpha1.FencingRequest{testobj.FencingRequest("w1", testobj.InPhase(fencingv1alpha1.FencingPhaseFencing))}, want: ActNone, follows: "w1-req"},
		{name: "another request of the node, terminal: create", rem: remediation(), nodeName: "w1", node: node,
			requests: []*fencingv1alpha1.FencingRequest{testobj.FencingRequest("w1", testobj.InPhase(fencingv1alpha1.FencingPhaseRecovered))}, want: ActCreate},
		{name: "timed out without a request: nothing is started", rem: remediation(timedOut), nodeName: "w1", node: node, want: ActNone, why: "timed"},
		{name: "timed out, own request not admitted: cancel", rem: remediation(timedOut), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseTriaged)}, want: ActCancel},
		{name: "timed out, own request fencing: left to finish", rem: remediation(timedOut), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseFencing)}, want: ActNone, follows: "w1-req"},
		{name: "timed out, cancel already asked", rem: remediation(timedOut), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(P, askedToCancel)}, want: ActNone},
		{name: "deleted, own request pending: cancel first", rem: remediation(deleting), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(P)}, want: ActCancel},
		{name: "deleted, cancel asked: finalizer goes", rem: remediation(deleting), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(P, askedToCancel)}, want: ActRemoveFinalizer, why: "asked to cancel"},
		{name: "deleted, own request fencing: never stopped, finalizer goes", rem: remediation(deleting), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseFencing)}, want: ActRemoveFinalizer, why: "left to finish"},
		{name: "deleted, own request fenced: finalizer goes", rem: remediation(deleting), nodeName: "w1", node: node, requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseFenced)}, want: ActRemoveFinalizer},
		{name: "deleted, another's pending request: never cancelled", rem: remediation(deleting), nodeName: "w1", node: node,
			requests: []*fencingv1alpha1.FencingRequest{testobj.FencingRequest("w1")}, want: ActRemoveFinalizer, why: "not its own"},
		{name: "deleted, no request", rem: remediation(deleting), nodeName: "w1", want: ActRemoveFinalizer},
		{name: "deleted without our finalizer: nothing", rem: remediation(deleting, noFinalizer), nodeName: "w1", requests: []*fencingv1alpha1.FencingRequest{ownRequest(P)}, want: ActNone},
		{name: "a request of another remediation of the same name is not its own", rem: remediation(), nodeName: "w1", node: node,
			requests: []*fencingv1alpha1.FencingRequest{ownRequest(fencingv1alpha1.FencingPhaseFailed, func(r *fencingv1alpha1.FencingRequest) { r.Labels[RemediationUIDLabel] = "uid-old" })}, want: ActCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Input{Remediation: tt.rem, NodeName: tt.nodeName, NodeProblem: "the Machine has no status.nodeRef", Node: tt.node, Requests: tt.requests})
			if d.Action != tt.want {
				t.Errorf("action %q (%s), want %q", d.Action, d.Why, tt.want)
			}
			if tt.follows != "" && (d.Request == nil || d.Request.Name != tt.follows) {
				t.Errorf("follows %v, want %s", d.Request, tt.follows)
			}
			if !strings.Contains(d.Why, tt.why) {
				t.Errorf("why %q, want it to contain %q", d.Why, tt.why)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	oos := testobj.RequestCondition(metav1.Condition{Type: fencingv1alpha1.FencingRequestOutOfServiceApplied, Status: metav1.ConditionTrue, Reason: "TaintAdded"})
	failed := func(r *fencingv1alpha1.FencingRequest) {
		r.Status.ErrorReason, r.Status.ErrorMessage = "MaxAttemptsReached", "5 rounds failed"
	}
	node := testobj.Node("w1")
	tests := []struct {
		name                  string
		rem                   *fencingv1alpha1.FencelineRemediation
		node                  *v1.Node
		req                   *fencingv1alpha1.FencingRequest
		processing, succeeded metav1.ConditionStatus
		reason, msg           string
	}{
		{name: "no request yet", rem: remediation(), node: node, processing: "True", succeeded: "Unknown", reason: ReasonStarting},
		{name: "no node", rem: remediation(), processing: "True", succeeded: "Unknown", reason: ReasonNodeUnknown},
		{name: "timed out before a request", rem: remediation(timedOut), node: node, processing: "False", succeeded: "Unknown", reason: ReasonTimedOut},
		{name: "pending", rem: remediation(), node: node, req: ownRequest(""), processing: "True", succeeded: "Unknown", reason: ReasonInProgress, msg: "is Pending"},
		{name: "fencing", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseFencing), processing: "True", succeeded: "Unknown", reason: ReasonInProgress},
		{name: "fenced, workloads not released yet", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseFenced), processing: "True", succeeded: "Unknown", reason: ReasonAwaitingRelease},
		{name: "fenced and out of service", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseFenced, oos), processing: "False", succeeded: "True", reason: ReasonNodeFenced},
		{name: "recovering", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseRecovering), processing: "False", succeeded: "True", reason: ReasonNodeFenced},
		{name: "recovered", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseRecovered), processing: "False", succeeded: "True", reason: ReasonNodeFenced},
		{name: "failed", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseFailed, failed), processing: "False", succeeded: "False", reason: ReasonFencingFailed, msg: "MaxAttemptsReached: 5 rounds failed"},
		{name: "cancelled", rem: remediation(), node: node, req: ownRequest(fencingv1alpha1.FencingPhaseCancelled), processing: "False", succeeded: "False", reason: ReasonFencingCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Remediation: tt.rem, NodeName: "w1", Node: tt.node}
			if tt.req != nil {
				in.Requests = []*fencingv1alpha1.FencingRequest{tt.req}
			}
			s := Status(in, Decide(in))
			if len(s.Conditions) != 2 {
				t.Fatalf("conditions %+v, want Processing and Succeeded", s.Conditions)
			}
			p, sc := s.Conditions[0], s.Conditions[1]
			if p.Type != fencingv1alpha1.RemediationProcessing || sc.Type != fencingv1alpha1.RemediationSucceeded {
				t.Fatalf("condition types %s, %s", p.Type, sc.Type)
			}
			if p.Status != tt.processing || sc.Status != tt.succeeded || sc.Reason != tt.reason {
				t.Errorf("Processing=%s Succeeded=%s (%s), want %s, %s (%s)", p.Status, sc.Status, sc.Reason, tt.processing, tt.succeeded, tt.reason)
			}
			if !strings.Contains(sc.Message, tt.msg) {
				t.Errorf("message %q, want it to contain %q", sc.Message, tt.msg)
			}
			if tt.req != nil && (s.FencingRequestName != tt.req.Name || s.Phase == "") {
				t.Errorf("request %q phase %q", s.FencingRequestName, s.Phase)
			}
		})
	}
}
