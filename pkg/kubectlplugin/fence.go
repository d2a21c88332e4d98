package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// ErrAborted is returned when the user does not confirm.
var ErrAborted = errors.New("aborted: nothing was changed")

// Confirm asks the user to go ahead with what prompt describes.
type Confirm func(prompt string) (bool, error)

// FenceOptions is a manual fence.
type FenceOptions struct {
	Node string
	// Policy is spec.policyName; empty lets the node's policy apply.
	Policy string
	// Action is Off or Reboot.
	Action fencingv1alpha1.FenceAction
	// Requester is who asks, "user:<name>".
	Requester string
	Confirm   Confirm
	Now       time.Time
}

// fenceState is what fence and unfence read before they write.
type fenceState struct {
	node  *v1.Node
	lease *coordinationv1.Lease
	snap  *Snapshot
	input nodefencing.Input
}

// readFenceState reads the node, its Lease, its requests, the policies and
// classes, and its VolumeAttachments, and gathers nodefencing.Decide's input.
func readFenceState(ctx context.Context, c Clients, nodeName string, now time.Time) (*fenceState, error) {
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %q not found", nodeName)
	}
	if err != nil {
		return nil, permissionHint(err, "get", "nodes")
	}
	st := &fenceState{node: node, snap: &Snapshot{Now: now, Nodes: []*v1.Node{node}}}
	if err := st.snap.readFencing(ctx, c.Fencing); err != nil {
		return nil, err
	}
	if !st.snap.FencingAPI {
		return nil, errors.New("the fencing API (FencingRequests, group fenceline.io) is not installed: install the CRDs with kubectl apply -k deploy/")
	}
	vas, err := c.Kube.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, permissionHint(err, "list", "volumeattachments.storage.k8s.io")
	}
	st.snap.VolumeAttachments = pointers(vas.Items)
	if st.lease, err = nodeutil.ReadLease(ctx, c.Kube, nodeName); err != nil && !apierrors.IsNotFound(err) {
		return nil, permissionHint(err, "get", "leases.coordination.k8s.io in kube-node-lease")
	}
	st.input = FencingInput(st.snap, st.lease, node)
	return st, nil
}

// Fence creates a manual FencingRequest for the node, as docs/fencing.md
// describes one: reason Manual, the requester, approved. It refuses for a
// node that already has an open request.
func Fence(ctx context.Context, c Clients, o FenceOptions) (*fencingv1alpha1.FencingRequest, error) {
	st, err := readFenceState(ctx, c, o.Node, o.Now)
	if err != nil {
		return nil, err
	}
	if r := st.input.Request; r != nil {
		return nil, fmt.Errorf("node %s already has an open FencingRequest %s (phase %s, requested by %s): one request per node; watch it with kubectl get fencingrequest %s",
			o.Node, r.Name, phaseOf(r), r.Spec.Requester, r.Name)
	}
	// A manual request still follows a policy's levels: refuse one that
	// node-fencing would leave waiting for a usable policy.
	policy, problem := st.snap.resolvePolicy(st.node, o.Policy)
	switch {
	case problem != "":
		return nil, fmt.Errorf("node %s cannot be fenced: %s", o.Node, problem)
	case policy == nil:
		return nil, fmt.Errorf("no FencePolicy selects node %s: a manual fence still needs one for its fence levels; name one with --policy", o.Node)
	}
	prompt := fmt.Sprintf("Fence node %s (action %s, FencePolicy %s): its power is cut through its fence devices, then it is put out of service so that its pods and volumes move. Continue?",
		o.Node, o.Action, policy.Name)
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return nil, errors.Join(ErrAborted, err)
	}
	req := &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: fencingreq.GenerateName(o.Node),
			Labels:       map[string]string{names.FencingRequestNodeLabel: fencingreq.NodeLabelValue(o.Node)},
		},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: o.Node, NodeUID: st.node.UID, PolicyName: o.Policy,
			Reason: "Manual", Requester: o.Requester, Action: o.Action, Approved: ptr.To(true),
		},
	}
	created, err := c.Fencing.FencingV1alpha1().FencingRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, permissionHint(err, "create", "fencingrequests.fenceline.io")
	}
	return created, nil
}

func phaseOf(r *fencingv1alpha1.FencingRequest) fencingv1alpha1.FencingPhase {
	if r.Status.Phase == "" {
		return fencingv1alpha1.FencingPhasePending
	}
	return r.Status.Phase
}

// UnfenceOptions is a manual unfence.
type UnfenceOptions struct {
	Node      string
	Requester string
	Confirm   Confirm
	Now       time.Time
}

// Unfence does what a human may do about the node's open FencingRequest:
//
//   - not admitted yet (Pending, Triaged): delete it, which cancels it;
//   - Fencing: refuse, a fence in progress is never stopped;
//   - Fenced or Recovering: only when nodefencing.Decide says the policy
//     unfences by hand (ManualUnfence: back with a new boot ID, Ready for
//     the healthy delay, no VolumeAttachment or volume in use left) are the
//     node's fencing conditions set False, Fenceline's taints removed and
//     the request deleted, exactly as the controller unfences; otherwise
//     the decision says why not, or that the controller does it itself.
//
// It returns what was done.
func Unfence(ctx context.Context, c Clients, o UnfenceOptions) (string, error) {
	st, err := readFenceState(ctx, c, o.Node, o.Now)
	if err != nil {
		return "", err
	}
	r := st.input.Request
	if r == nil {
		if st.input.Blocked != "" {
			return "", fmt.Errorf("node %s has no open FencingRequest; %s", o.Node, st.input.Blocked)
		}
		return "", fmt.Errorf("node %s has no open FencingRequest: nothing to unfence", o.Node)
	}
	switch phaseOf(r) {
	case fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged:
		return cancelRequest(ctx, c, o, r)
	case fencingv1alpha1.FencingPhaseFencing:
		return "", fmt.Errorf("FencingRequest %s is Fencing: a fence in progress is never stopped (the node may have written while it looked dead); wait for Fenced or Failed", r.Name)
	}
	d := nodefencing.Decide(st.input)
	switch {
	case d.Reason == nodefencing.ReasonManualUnfence:
		return manualUnfence(ctx, c, o, st)
	case d.Step == nodefencing.StepRecovering || d.Step == nodefencing.StepRecover:
		return "", fmt.Errorf("node-fencing unfences node %s by itself (%s): %s", o.Node, d.Step, d.Why)
	}
	return "", fmt.Errorf("node %s cannot be unfenced now (FencingRequest %s, %s): %s", o.Node, r.Name, joinNonEmpty(" ", string(phaseOf(r)), bracket(d.Reason)), d.Why)
}

// cancelRequest deletes a request that was not admitted, then clears the
// node as node-fencing's cancel does: FencingTriaged False and Fenceline's
// fencing taints removed, once no request is open for it any more.
func cancelRequest(ctx context.Context, c Clients, o UnfenceOptions, r *fencingv1alpha1.FencingRequest) (string, error) {
	prompt := fmt.Sprintf("Delete FencingRequest %s (%s, not admitted yet), which cancels the fence of node %s?", r.Name, phaseOf(r), o.Node)
	if r.Spec.Requester == nodefencing.RequesterController {
		prompt += " node-fencing makes a new request while the node stays unhealthy."
	}
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return "", errors.Join(ErrAborted, err)
	}
	if err := deleteRequest(ctx, c, r); err != nil {
		return "", err
	}
	noRequest := func(st *fenceState) error {
		if cur := st.input.Request; cur != nil {
			return fmt.Errorf("FencingRequest %s was deleted, but node %s has another open request %s now; its taints and conditions are left to it", r.Name, o.Node, cur.Name)
		}
		return nil
	}
	msg := fmt.Sprintf("FencingRequest %s: cancelled by hand by %s", r.Name, o.Requester)
	cond := v1.NodeCondition{Type: names.FencingTriagedCondition, Status: v1.ConditionFalse, Reason: "Cancelled", Message: msg}
	if err := writeNode(ctx, c, o, true, noRequest, func(n *v1.Node) bool {
		return nodeutil.Condition(n, names.FencingTriagedCondition) != nil && nodefencing.ApplyNodeConditions(n, metav1.NewTime(o.Now), cond)
	}); err != nil {
		return "", permissionHint(err, "update", "nodes/status")
	}
	if err := writeNode(ctx, c, o, false, noRequest, func(n *v1.Node) bool { return nodefencing.StripFencingTaints(n, r) }); err != nil {
		return "", permissionHint(err, "update", "nodes")
	}
	return fmt.Sprintf("FencingRequest %s deleted and node %s's fencing taints and triage cleared: the fence is cancelled", r.Name, o.Node), nil
}

func deleteRequest(ctx context.Context, c Clients, r *fencingv1alpha1.FencingRequest) error {
	err := c.Fencing.FencingV1alpha1().FencingRequests().Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return permissionHint(err, "delete", "fencingrequests.fenceline.io")
	}
	return nil
}

// writeNode changes the node (its status when status is true) on fresh
// data, after check accepted that data, retrying on conflicts.
func writeNode(ctx context.Context, c Clients, o UnfenceOptions, status bool, check func(*fenceState) error, mutate func(*v1.Node) bool) error {
	nodes := c.Kube.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh, err := readFenceState(ctx, c, o.Node, o.Now)
		if err != nil {
			return err
		}
		if err := check(fresh); err != nil {
			return err
		}
		n := fresh.node.DeepCopy()
		if !mutate(n) {
			return nil
		}
		if status {
			_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		} else {
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
}

// manualUnfence unfences as the controller's recover step does: the
// conditions first (the attacher stops treating the node as cut off), then
// the taints, then the request. Each node write re-decides on fresh data.
func manualUnfence(ctx context.Context, c Clients, o UnfenceOptions, st *fenceState) (string, error) {
	r := st.input.Request
	prompt := fmt.Sprintf("Unfence node %s: set its fencing conditions False, remove Fenceline's taints (and the out-of-service taint FencingRequest %s added) and delete the request?", o.Node, r.Name)
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return "", errors.Join(ErrAborted, err)
	}
	msg := fmt.Sprintf("FencingRequest %s: unfenced by hand by %s", r.Name, o.Requester)
	check := func(fresh *fenceState) error { return stillManualUnfence(fresh, r) }
	now := metav1.NewTime(o.Now)
	if err := writeNode(ctx, c, o, true, check, func(n *v1.Node) bool {
		return nodefencing.ApplyNodeConditions(n, now, nodefencing.UnfencedConditions(msg)...)
	}); err != nil {
		return "", permissionHint(err, "update", "nodes/status")
	}
	if err := writeNode(ctx, c, o, false, check, func(n *v1.Node) bool { return nodefencing.StripFencingTaints(n, r) }); err != nil {
		return "", permissionHint(err, "update", "nodes")
	}
	if err := deleteRequest(ctx, c, r); err != nil {
		return "", err
	}
	return fmt.Sprintf("node %s unfenced: conditions False, taints removed, FencingRequest %s deleted", o.Node, r.Name), nil
}

// stillManualUnfence re-decides on fresh data: the same request is open and
// the policy still says the node may be unfenced by hand.
func stillManualUnfence(st *fenceState, r *fencingv1alpha1.FencingRequest) error {
	// Conditions already False are written by a previous step of this
	// unfence: the request is what still ties the node to the fence.
	if cur := st.input.Request; cur == nil || cur.UID != r.UID {
		return fmt.Errorf("FencingRequest %s changed while unfencing: nothing more written, look again with kubectl fenceline status", r.Name)
	}
	if d := nodefencing.Decide(st.input); d.Reason != nodefencing.ReasonManualUnfence {
		return fmt.Errorf("the decision changed on fresh data (%s): %s", joinNonEmpty(" ", string(d.Step), d.Reason), d.Why)
	}
	return nil
}
