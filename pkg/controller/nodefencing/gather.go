package nodefencing

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/networkfence"
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
//
// nf reads the NetworkFences of a Fenced or Recovering request; nil when
// the caller cannot, which Decide takes as unreadable (the node waits).
func Gather(ctx context.Context, v view.View, f view.Fencing, nf networkfence.Reader, nodeName string, now time.Time, observe ObserveFunc) (Input, error) {
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
	if err := resolve(ctx, f, &in); err != nil {
		return in, err
	}
	return in, GatherNetworkFences(ctx, nf, &in)
}

// GatherNetworkFences fills in.NetworkFence for a Fenced or Recovering
// request: its NetworkFences, and the NetworkFenceClasses its policy
// names. An API that is not served is an answer (none can exist), not an
// error; another read error is returned.
func GatherNetworkFences(ctx context.Context, nf networkfence.Reader, in *Input) error {
	in.NetworkFence = NetworkFenceInput{}
	r := in.Request
	if r == nil || (r.Status.Phase != fencingv1alpha1.FencingPhaseFenced && r.Status.Phase != fencingv1alpha1.FencingPhaseRecovering) {
		return nil
	}
	if nf == nil {
		// Read as not served: a reader without a dynamic client (unit
		// tests, a plugin without one) lets the recovery go on, and a
		// NetworkFence method waits.
		in.NetworkFence.Problem = "NetworkFences are not read here"
		return nil
	}
	fences, err := nf.FencesOf(ctx, r.UID)
	switch {
	case errors.Is(err, networkfence.ErrNotServed):
		in.NetworkFence.Problem = err.Error()
		return nil
	case err != nil:
		// Unreadable is not absent: whoever ignores the error still
		// decides to wait.
		in.NetworkFence = NetworkFenceInput{Served: true, Problem: err.Error()}
		return err
	}
	in.NetworkFence = NetworkFenceInput{Served: true, Fences: fences, Classes: map[string]networkfence.Class{}}
	for _, m := range networkFenceMethods(in.Policy) {
		c, err := nf.Class(ctx, m.NetworkFenceClassName)
		if err != nil {
			in.NetworkFence.Problem = err.Error()
			return err
		}
		if c != nil {
			in.NetworkFence.Classes[c.Name] = *c
		}
	}
	return nil
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
