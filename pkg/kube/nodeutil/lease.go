package nodeutil

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
)

// LookupLease returns the node's Lease from a lister of kube-node-lease,
// nil when there is none.
func LookupLease(leases coordinationlisters.LeaseNamespaceLister, node string) (*coordinationv1.Lease, error) {
	l, err := leases.Get(node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up node Lease %s: %w", node, err)
	}
	return l, nil
}

// ReadLease reads the node's Lease from the API server, nil when there is
// none, for a write-time re-check: a kubelet that renewed it between the
// decision and the write must count.
func ReadLease(ctx context.Context, client kubernetes.Interface, node string) (*coordinationv1.Lease, error) {
	l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node Lease %s: %w", node, err)
	}
	return l, nil
}
