package kubectlplugin

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/view"
)

// nodeView is view.View over what explain read: the snapshot, and the
// objects of the one node it explains (its Lease and pods). The
// controllers' Gather functions read it as they read their caches.
type nodeView struct {
	s    *Snapshot
	objs *NodeObjects
	node string
}

var (
	_ view.View    = nodeView{}
	_ view.Fencing = nodeView{}
)

func (v nodeView) Node(_ context.Context, name string) (*v1.Node, error) { return v.s.Node(name), nil }

func (v nodeView) NodeLease(_ context.Context, node string) (*coordinationv1.Lease, error) {
	if node != v.node {
		return nil, nil
	}
	return v.objs.Lease, nil
}

func (v nodeView) PodsOnNode(_ context.Context, node string) ([]*v1.Pod, error) {
	if node != v.node {
		return nil, nil
	}
	return v.objs.Pods, nil
}

func (v nodeView) VolumeAttachmentsOnNode(_ context.Context, node string) ([]*storagev1.VolumeAttachment, error) {
	return v.s.VAsOf(node), nil
}

func (v nodeView) FencingRequestsOf(_ context.Context, node string) ([]*fencingv1alpha1.FencingRequest, error) {
	return v.s.RequestsOf(node), nil
}

func (v nodeView) FencePolicies(context.Context) ([]*fencingv1alpha1.FencePolicy, error) {
	return v.s.Policies, nil
}

func (v nodeView) FenceClasses(context.Context) ([]*fencingv1alpha1.FenceClass, error) {
	return v.s.Classes, nil
}

func (v nodeView) FenceTarget(_ context.Context, node string) (*fencingv1alpha1.FenceTarget, error) {
	if node != v.node {
		return nil, nil
	}
	return v.objs.Target, nil
}
