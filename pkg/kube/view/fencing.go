package view

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
)

// Fencing reads the fencing API objects a node-fencing decision reads.
type Fencing interface {
	// FencingRequestsOf returns the FencingRequests of node.
	FencingRequestsOf(ctx context.Context, node string) ([]*fencingv1alpha1.FencingRequest, error)
	// FencePolicies returns every FencePolicy.
	FencePolicies(ctx context.Context) ([]*fencingv1alpha1.FencePolicy, error)
	// FenceClasses returns every FenceClass.
	FenceClasses(ctx context.Context) ([]*fencingv1alpha1.FenceClass, error)
	// FenceTarget returns the node's FenceTarget (named after the node),
	// nil when it has none.
	FenceTarget(ctx context.Context, node string) (*fencingv1alpha1.FenceTarget, error)
}

// FencingInformers is Fencing over the fencing API's informer caches.
// Requests must carry an index of requests by node, named RequestsByNode.
type FencingInformers struct {
	Requests       cache.Indexer
	RequestsByNode string
	Policies       fencinglisters.FencePolicyLister
	Classes        fencinglisters.FenceClassLister
	Targets        fencinglisters.FenceTargetLister
}

var _ Fencing = FencingInformers{}

// FencingRequestsOf returns the cached requests of node.
func (f FencingInformers) FencingRequestsOf(_ context.Context, node string) ([]*fencingv1alpha1.FencingRequest, error) {
	objs, err := f.Requests.ByIndex(f.RequestsByNode, node)
	if err != nil {
		return nil, fmt.Errorf("looking up FencingRequests of node %s: %w", node, err)
	}
	out := make([]*fencingv1alpha1.FencingRequest, 0, len(objs))
	for _, o := range objs {
		if r, ok := o.(*fencingv1alpha1.FencingRequest); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// FencePolicies returns the cached policies.
func (f FencingInformers) FencePolicies(context.Context) ([]*fencingv1alpha1.FencePolicy, error) {
	out, err := f.Policies.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing FencePolicies: %w", err)
	}
	return out, nil
}

// FenceClasses returns the cached classes.
func (f FencingInformers) FenceClasses(context.Context) ([]*fencingv1alpha1.FenceClass, error) {
	out, err := f.Classes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing FenceClasses: %w", err)
	}
	return out, nil
}

// FenceTarget returns the cached FenceTarget of node, nil when there is
// none.
func (f FencingInformers) FenceTarget(_ context.Context, node string) (*fencingv1alpha1.FenceTarget, error) {
	t, err := f.Targets.Get(node)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("getting FenceTarget %s: %w", node, err)
	}
	return t, nil
}
