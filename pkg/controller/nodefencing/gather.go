package nodefencing

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/view"
)

// ObserveFunc judges a node Lease: when its last renewal counts as made,
// and whether it was seen renewed. The controller counts from when it
// observed the renewal change (its history); explain, which has none, from
// the Lease's renewTime (detect.Snapshot).
type ObserveFunc func(*coordinationv1.Lease) (observedAt time.Time, renewed bool)

// Gather reads Decide's input about nodeName from v and f: the node, its
// Lease (judged by observe), its FencingRequests, its VolumeAttachments,
// and the policy it resolves to with that policy's cross-object problems.
// The controller reads its caches and adds the signs of life only its
// history knows; explain reads its snapshot. A node that does not exist
// is a nil Node, not an error: its requests still decide.
func Gather(ctx context.Context, v view.View, f view.Fencing, nodeName string, now time.Time, observe ObserveFunc) (Input, error) {
	in := Input{Now: now}
	var err error
	if in.Node, err = v.Node(ctx, nodeName); err != nil {
		return in, err
	}
	if in.Lease, err = v.NodeLease(ctx, nodeName); err != nil {
		return in, err
	}
	in.LeaseObserved, in.LeaseRenewed = observe(in.Lease)
	reqs, err := f.FencingRequestsOf(ctx, nodeName)
	if err != nil {
		return in, err
	}
	in.SetRequests(reqs)
	vas, err := v.VolumeAttachmentsOnNode(ctx, nodeName)
	if err != nil {
		return in, err
	}
	in.VolumeAttachments = len(vas)
	if in.Target, err = f.FenceTarget(ctx, nodeName); err != nil {
		return in, err
	}
	return in, resolve(ctx, f, &in)
}

// resolve fills the policy of the input's node or request, and the
// policy's cross-object problems.
func resolve(ctx context.Context, f view.Fencing, in *Input) error {
	name := ""
	if in.Request != nil {
		name = in.Request.Spec.PolicyName
	}
	var err error
	in.Policy, in.PolicyProblem, err = ResolveFrom(ctx, f, in.Node, name)
	return err
}

// ResolveFrom resolves node's policy from f: the one named name, else the
// one that selects node (ResolvePolicy), and why it cannot be used
// (ResolvePolicy's problem, or PolicyProblem's for its classes).
func ResolveFrom(ctx context.Context, f view.Fencing, node *v1.Node, name string) (*fencingv1alpha1.FencePolicy, string, error) {
	policies, err := f.FencePolicies(ctx)
	if err != nil {
		return nil, "", err
	}
	policy, problem := ResolvePolicy(node, name, policies)
	if policy == nil {
		return nil, problem, nil
	}
	classes, err := f.FenceClasses(ctx)
	if err != nil {
		return nil, "", err
	}
	byName := make(map[string]*fencingv1alpha1.FenceClass, len(classes))
	for _, cl := range classes {
		byName[cl.Name] = cl
	}
	return policy, PolicyProblem(policy, byName), nil
}

// withNode is a view whose node is one already read (fresh from the API
// server at write time, or absent there).
type withNode struct {
	view.View
	node *v1.Node
}

func (w withNode) Node(context.Context, string) (*v1.Node, error) { return w.node, nil }
