package forceeviction

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/kube/renewals"
)

// TestLivenessJudgedByObservedRenewals: the kubelet's Lease is judged by
// when this controller saw it renewed, never by the node's clock. A node
// whose clock runs 30 s behind (renewTime looks old) but renews is alive;
// one whose clock runs 30 s ahead (renewTime looks fresh) but stopped
// renewing is dead once the grace has passed since the last renewal seen.
func TestLivenessJudgedByObservedRenewals(t *testing.T) {
	const grace = 10 * time.Second
	now := testobj.Epoch
	c := &Controller{renewed: renewals.NewTracker(func() time.Time { return now })}
	down := testobj.Node("n1", testobj.NotReadySince(now.Add(-time.Hour)))
	lease := func(renew time.Time) *coordinationv1.Lease { return testobj.Lease("n1", renew) }

	behind := lease(now.Add(-30 * time.Second))
	c.renewed.OnAdd(behind, false)
	for range 3 {
		now = now.Add(5 * time.Second)
		behind = lease(behind.Spec.RenewTime.Add(5 * time.Second))
		c.renewed.OnUpdate(nil, behind)
		if got := KubeletLiveness(down, c.observed(behind), now, grace); !got.Alive {
			t.Fatalf("a renewing kubelet whose clock runs 30 s behind judged dead: %+v", got)
		}
	}
	if got := KubeletLiveness(down, behind, now, grace); got.Alive {
		t.Fatalf("setup: on the node's clock the Lease should look stale: %+v", got)
	}

	ahead := lease(now.Add(30 * time.Second))
	ahead.Name = "n2"
	c.renewed.OnAdd(ahead, false)
	now = now.Add(grace)
	if got := KubeletLiveness(down, c.observed(ahead), now, grace); got.Alive {
		t.Fatalf("a kubelet silent for the grace judged alive because its clock runs ahead: %+v", got)
	}
	if got := KubeletLiveness(down, ahead, now, grace); !got.Alive {
		t.Fatalf("setup: on the node's clock the Lease should look fresh: %+v", got)
	}
	if c.observed(nil) != nil || c.observed(&coordinationv1.Lease{}).Spec.RenewTime != nil {
		t.Errorf("a missing Lease or renewTime must stay missing: no evidence of life")
	}
}
