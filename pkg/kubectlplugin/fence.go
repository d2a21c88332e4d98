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
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
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
	// OverrideExclusion fences a node labelled
	// fenceline.io/exclude-from-fencing, which is refused otherwise.
	OverrideExclusion bool
	Confirm           Confirm
	Now               time.Time
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
	st.snap.readNetworkFences(ctx, discoveryOf(c.Kube), c.Dynamic)
	st.input = FencingInput(st.snap, st.lease, node)
	return st, nil
}

// Fence asks for a manual fence: it creates the FencingRequest
// docs/fencing.md describes (reason Manual, the requester, approved), and
// node-fencing does the rest, every write re-decided on fresh data. It
// refuses for a node that already has an open request, has no usable
// policy, or is labelled detect.ExcludeLabel without OverrideExclusion.
func Fence(ctx context.Context, c Clients, o FenceOptions) (*fencingv1alpha1.FencingRequest, error) {
	st, err := readFenceState(ctx, c, o.Node, o.Now)
	if err != nil {
		return nil, err
	}
	if r := st.input.Request; r != nil {
		return nil, fmt.Errorf("node %s already has an open FencingRequest %s (phase %s, requested by %s): one request per node; watch it with kubectl get fencingrequest %s",
			o.Node, r.Name, phaseOf(r), r.Spec.Requester, r.Name)
	}
	_, excluded := st.node.Labels[detect.ExcludeLabel]
	if excluded && !o.OverrideExclusion {
		return nil, fmt.Errorf("node %s is labelled %s: it is kept out of fencing on purpose (a node whose power-off would hurt more than its failover helps); pass --override-exclusion to fence it anyway", o.Node, detect.ExcludeLabel)
	}
	// A manual request still follows a policy's levels: refuse one that
	// node-fencing would leave waiting for a usable policy.
	// The snapshot's view never fails.
	policy, problem, _ := nodefencing.ResolveFrom(ctx, nodeView{s: st.snap, node: o.Node}, st.node, o.Policy)
	switch {
	case problem != "":
		return nil, fmt.Errorf("node %s cannot be fenced: %s", o.Node, problem)
	case policy == nil:
		return nil, fmt.Errorf("no FencePolicy selects node %s: a manual fence still needs one for its fence levels; name one with --policy", o.Node)
	}
	prompt := fmt.Sprintf("Fence node %s (action %s, FencePolicy %s): its power is cut through its fence devices, then it is put out of service so that its pods and volumes move. Continue?",
		o.Node, o.Action, policy.Name)
	if excluded {
		prompt = fmt.Sprintf("Node %s is labelled %s. ", o.Node, detect.ExcludeLabel) + prompt
	}
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
	if excluded {
		req.Annotations = map[string]string{names.OverrideExclusionAnnotation: o.Requester}
	}
	created, err := c.Fencing.FencingV1alpha1().FencingRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, permissionHint(err, "create", "fencingrequests.fenceline.io")
	}
	return created, nil
}

// FenceAsk is what waiting on a created request waits for: node-fencing
// proved the power-off (phase Fenced, or later).
func FenceAsk(r *fencingv1alpha1.FencingRequest) *Ask {
	return &Ask{
		Node: r.Spec.NodeName, Object: "fencingrequest/" + r.Name,
		Asked: fmt.Sprintf("fencingrequest.fenceline.io/%s created: node-fencing fences node %s", r.Name, r.Spec.NodeName),
		Doing: "fence node " + r.Spec.NodeName,
		Watch: "kubectl get fencingrequest " + r.Name + " -w",
		done: func(st *fenceState) (bool, error) {
			cur := requestByUID(st, r)
			if cur == nil {
				return false, fmt.Errorf("FencingRequest %s was deleted before the node was fenced", r.Name)
			}
			switch cur.Status.Phase {
			case fencingv1alpha1.FencingPhaseFenced, fencingv1alpha1.FencingPhaseRecovering, fencingv1alpha1.FencingPhaseRecovered:
				return true, nil
			case fencingv1alpha1.FencingPhaseFailed, fencingv1alpha1.FencingPhaseCancelled:
				return false, fmt.Errorf("FencingRequest %s ended %s: %s", r.Name, cur.Status.Phase, joinNonEmpty(": ", cur.Status.ErrorReason, cur.Status.ErrorMessage, lastConditionMessage(cur)))
			}
			return false, nil
		},
	}
}

func phaseOf(r *fencingv1alpha1.FencingRequest) fencingv1alpha1.FencingPhase {
	if r.Status.Phase == "" {
		return fencingv1alpha1.FencingPhasePending
	}
	return r.Status.Phase
}

// requestByUID finds r among the node's requests read fresh; nil when it
// is gone.
func requestByUID(st *fenceState, r *fencingv1alpha1.FencingRequest) *fencingv1alpha1.FencingRequest {
	for _, cur := range st.snap.RequestsOf(r.Spec.NodeName) {
		if cur.UID == r.UID {
			return cur
		}
	}
	return nil
}

// lastConditionMessage is the message of the request's most recently
// changed condition, "" when none.
func lastConditionMessage(r *fencingv1alpha1.FencingRequest) string {
	msg, at := "", metav1.Time{}
	for _, c := range r.Status.Conditions {
		if !c.LastTransitionTime.Before(&at) {
			msg, at = c.Message, c.LastTransitionTime
		}
	}
	return msg
}
