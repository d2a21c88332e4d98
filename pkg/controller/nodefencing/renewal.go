package nodefencing

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
)

// renewal is the input's Lease with when the controller observed its
// renewal, as detect judges it.
func (in Input) renewal() detect.Renewal {
	return detect.Renewal{Lease: in.Lease, ObservedAt: in.LeaseObserved, PowerOff: PoweredOff(in.Target, in.Lease)}
}

// PoweredOff reports whether target answers a power check asked for the
// Lease's current renewal with Off: the fence agent read every endpoint
// Off after the ask, so after the renewal was missed.
func PoweredOff(target *fencingv1alpha1.FenceTarget, lease *coordinationv1.Lease) bool {
	token := detect.PowerCheckToken(lease)
	if target == nil || token == "" || target.Status.PowerCheck == nil {
		return false
	}
	a := target.Status.PowerCheck
	return a.Token == token && a.PowerState == fencingv1alpha1.PowerStateOff
}

// observed is when the controller first saw the Lease's current renewal,
// on its own clock (zero for no Lease). A Lease read fresh that shows a
// renewal the cache has not delivered yet counts as renewed now; one first
// seen after a restart counts as renewed at that first sight, so a restart
// never makes a node look silent sooner (detection of a node that was
// already silent starts over).
func (c *Controller) observed(lease *coordinationv1.Lease) time.Time {
	at, _ := c.observation(lease)
	return at
}

// observation is observed, and whether that renewal was seen happen (a
// change watched since the start, not a first sight after a restart).
func (c *Controller) observation(lease *coordinationv1.Lease) (time.Time, bool) {
	if lease == nil {
		return time.Time{}, false
	}
	o := c.renewals.Observe(lease)
	return o.ObservedAt, o.Renewed
}
