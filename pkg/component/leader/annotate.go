package leader

import (
	"context"
	"maps"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// annotating returns c whose Lease creates and updates carry annotations.
// The elector's every acquisition and renewal then writes them, so they
// always describe the replica that holds the Lease, at no request of their
// own (a separate patch would also make the elector's next optimistic
// renewal conflict).
func annotating(c coordinationv1.CoordinationV1Interface, annotations map[string]string) coordinationv1.CoordinationV1Interface {
	if len(annotations) == 0 {
		return c
	}
	return annotatingCoordination{CoordinationV1Interface: c, annotations: annotations}
}

type annotatingCoordination struct {
	coordinationv1.CoordinationV1Interface
	annotations map[string]string
}

// Leases implements coordinationv1.LeasesGetter.
func (c annotatingCoordination) Leases(namespace string) coordinationv1.LeaseInterface {
	return annotatingLeases{LeaseInterface: c.CoordinationV1Interface.Leases(namespace), annotations: c.annotations}
}

type annotatingLeases struct {
	coordinationv1.LeaseInterface
	annotations map[string]string
}

// Create implements coordinationv1.LeaseInterface.
func (l annotatingLeases) Create(ctx context.Context, lease *coordv1.Lease, opts metav1.CreateOptions) (*coordv1.Lease, error) {
	return l.LeaseInterface.Create(ctx, l.annotate(lease), opts)
}

// Update implements coordinationv1.LeaseInterface.
func (l annotatingLeases) Update(ctx context.Context, lease *coordv1.Lease, opts metav1.UpdateOptions) (*coordv1.Lease, error) {
	return l.LeaseInterface.Update(ctx, l.annotate(lease), opts)
}

// annotate returns lease with the annotations set, a copy when it lacked
// any, so that the elector's own object is never changed under it.
func (l annotatingLeases) annotate(lease *coordv1.Lease) *coordv1.Lease {
	missing := false
	for k, v := range l.annotations {
		if lease.Annotations[k] != v {
			missing = true
		}
	}
	if !missing {
		return lease
	}
	out := lease.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	maps.Copy(out.Annotations, l.annotations)
	return out
}
