package kubectlplugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

func answer(yes bool) Confirm {
	return func(string) (bool, error) { return yes, nil }
}

func TestFence(t *testing.T) {
	kube, fenceObjs := world()
	for _, tc := range []struct {
		name, node, policy string
		noPolicy           bool
		confirm            bool
		forbid             bool
		wantErr            string
	}{
		{name: "creates a manual, approved request", node: "live", confirm: true},
		{name: "unknown node", node: "ghost", confirm: true, wantErr: `node "ghost" not found`},
		{name: "a node with an open request", node: "dead", confirm: true, wantErr: "already has an open FencingRequest dead-abcde (phase Fenced"},
		{name: "declined", node: "live", confirm: false, wantErr: ErrAborted.Error()},
		{name: "a policy that does not exist", node: "live", policy: "nope", confirm: true, wantErr: `node live cannot be fenced: FencePolicy "nope" does not exist`},
		{name: "no policy selects the node", node: "live", noPolicy: true, confirm: true, wantErr: "no FencePolicy selects node live"},
		{name: "RBAC denies the create", node: "live", confirm: true, forbid: true, wantErr: "not allowed to create fencingrequests.fenceline.io (RBAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := fenceObjs
			if tc.noPolicy {
				objs = []runtime.Object{fencingRequest("dead", fencingv1alpha1.FencingPhaseFenced)}
			}
			c, _, f := fakeClients(kube, objs)
			if tc.forbid {
				f.PrependReactor("create", "fencingrequests", forbidden)
			}
			r, err := Fence(context.Background(), c, FenceOptions{Node: tc.node, Policy: tc.policy, Action: fencingv1alpha1.FenceActionOff, Requester: "user:alice", Confirm: answer(tc.confirm), Now: now})
			reqs, lerr := f.FencingV1alpha1().FencingRequests().List(context.Background(), metav1.ListOptions{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Fence error = %v, want one containing %q", err, tc.wantErr)
				}
				if len(reqs.Items) != 1 {
					t.Errorf("%d FencingRequests after a refused fence, want the 1 there was", len(reqs.Items))
				}
				return
			}
			if err != nil {
				t.Fatalf("Fence: %v", err)
			}
			s := r.Spec
			if s.NodeName != "live" || s.NodeUID != "uid-live" || s.Reason != "Manual" || s.Requester != "user:alice" || s.Approved == nil || !*s.Approved ||
				r.Labels[names.FencingRequestNodeLabel] != "live" || r.GenerateName != "live-" {
				t.Errorf("request = %+v %+v, want a manual approved request for node live by user:alice, labelled with the node", r.ObjectMeta, s)
			}
			if len(reqs.Items) != 2 {
				t.Errorf("%d FencingRequests, want 2", len(reqs.Items))
			}
		})
	}
}

// unfenceWorld is a node "n" whose request is in phase, under a policy that
// unfences by hand; back says it returned Ready with a new boot ID, and vas
// VolumeAttachments are left for it.
func unfenceWorld(phase fencingv1alpha1.FencingPhase, back bool, vas int) ([]runtime.Object, []runtime.Object) {
	var opts []testobj.NodeOption
	if back {
		opts = append(opts, testobj.ReadySince(now.Add(-time.Minute)), testobj.BootID("boot-2"))
	}
	opts = append(opts, testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, t0),
		testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, t0))
	kube := []runtime.Object{fencedNode("n", opts...), testobj.Node("other", testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))}
	for i := range vas {
		kube = append(kube, testobj.VA("va-"+string(rune('a'+i)), driver, "pv", "n"))
	}
	r := fencingRequest("n", phase)
	return kube, []runtime.Object{fencePolicy("workers", "Manual"), fenceClass(), r}
}

func TestUnfence(t *testing.T) {
	for _, tc := range []struct {
		name     string
		phase    fencingv1alpha1.FencingPhase
		back     bool
		vas      int
		confirm  bool
		wantErr  string
		unfenced bool // conditions False, taints gone, request deleted
		deleted  bool // request deleted
		cleared  bool // triage taint gone, FencingTriaged False
	}{
		{name: "a request not admitted yet is cancelled", phase: fencingv1alpha1.FencingPhaseTriaged, confirm: true, deleted: true, cleared: true},
		{name: "declined", phase: fencingv1alpha1.FencingPhaseTriaged, confirm: false, wantErr: ErrAborted.Error()},
		{name: "a fence in progress is never stopped", phase: fencingv1alpha1.FencingPhaseFencing, confirm: true, wantErr: "never stopped"},
		{name: "a fenced node that is not back", phase: fencingv1alpha1.FencingPhaseFenced, confirm: true, wantErr: "cannot be unfenced now (FencingRequest n-abcde, Fenced (NodeNotReady))"},
		{name: "volume attachments remain", phase: fencingv1alpha1.FencingPhaseRecovering, back: true, vas: 1, confirm: true, wantErr: "VolumeAttachmentsRemain"},
		{name: "back with a new boot, nothing left: unfenced by hand", phase: fencingv1alpha1.FencingPhaseRecovering, back: true, confirm: true, unfenced: true, deleted: true, cleared: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, fenceObjs := unfenceWorld(tc.phase, tc.back, tc.vas)
			c, k, f := fakeClients(kube, fenceObjs)
			done, err := Unfence(context.Background(), c, UnfenceOptions{Node: "n", Requester: "user:alice", Confirm: answer(tc.confirm), Now: now})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Unfence error = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Unfence: %v", err)
			} else if done == "" {
				t.Error("Unfence says nothing about what it did")
			}
			_, gerr := f.FencingV1alpha1().FencingRequests().Get(context.Background(), "n-abcde", metav1.GetOptions{})
			if gone := gerr != nil; gone != tc.deleted {
				t.Errorf("request deleted = %v, want %v", gone, tc.deleted)
			}
			node, err := k.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fenced := cutoff.FencingComplete(node) || nodeutil.HasTaint(node, names.OutOfServiceTaint) || nodeutil.HasTaint(node, names.FencingRequiredTaint) || nodeutil.HasTaint(node, names.FencingTriagedTaint)
			if fenced == tc.unfenced {
				t.Errorf("node after unfence: conditions %+v, taints %+v; want unfenced %v", node.Status.Conditions, node.Spec.Taints, tc.unfenced)
			}
			cond := nodeutil.Condition(node, names.FencingTriagedCondition)
			triaged := cond == nil || cond.Status == v1.ConditionTrue || nodeutil.HasTaint(node, names.FencingTriagedTaint)
			if triaged == tc.cleared {
				t.Errorf("node after unfence: conditions %+v, taints %+v; want triage cleared %v", node.Status.Conditions, node.Spec.Taints, tc.cleared)
			}
			if tc.unfenced && node.Annotations[names.OutOfServiceOwnerAnnotation] != "" {
				t.Errorf("owner annotation left after unfence: %v", node.Annotations)
			}
		})
	}
}

func TestUnfenceLeavesAnotherOwnersOutOfServiceTaint(t *testing.T) {
	kube, fenceObjs := unfenceWorld(fencingv1alpha1.FencingPhaseRecovering, true, 0)
	kube[0].(*v1.Node).Annotations[names.OutOfServiceOwnerAnnotation] = "someone-else"
	c, k, _ := fakeClients(kube, fenceObjs)
	if _, err := Unfence(context.Background(), c, UnfenceOptions{Node: "n", Requester: "user:alice", Confirm: answer(true), Now: now}); err != nil {
		t.Fatalf("Unfence: %v", err)
	}
	node, err := k.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeutil.HasTaint(node, names.OutOfServiceTaint) || nodeutil.HasTaint(node, names.FencingRequiredTaint) {
		t.Errorf("taints = %+v: want the out-of-service taint another request added kept, Fenceline's fencing taints removed", node.Spec.Taints)
	}
}

func TestUnfenceWithoutRequest(t *testing.T) {
	kube, fenceObjs := world()
	c, _, _ := fakeClients(kube, fenceObjs)
	_, err := Unfence(context.Background(), c, UnfenceOptions{Node: "live", Confirm: answer(true), Now: now})
	if err == nil || !strings.Contains(err.Error(), "has no open FencingRequest") {
		t.Errorf("Unfence of a node without a request: %v, want no open FencingRequest", err)
	}
	if errors.Is(err, ErrAborted) {
		t.Error("a refusal is not an abort")
	}
}
