package nodefencing

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
)

// seenAtRenewal is in with its Lease's renewal observed at its renewTime:
// the node's clock agrees with the controller's and the watch is instant,
// as the decision tables assume.
func seenAtRenewal(in Input) Input {
	if in.Lease != nil && in.Lease.Spec.RenewTime != nil && in.LeaseObserved.IsZero() {
		in.LeaseObserved, in.LeaseRenewed = in.Lease.Spec.RenewTime.Time, true
	}
	return in
}

// renewLeaseAt renews the node's Lease with renewTime at (the node's
// clock), at the controller's now, and waits for the caches.
func (e *env) renewLeaseAt(name string, at time.Time) {
	e.t.Helper()
	if _, err := e.Kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(e.Ctx, testobj.Lease(name, at), metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// TestSyncRestartStartsDetectionOver: a controller started while n1's
// kubelet has been silent for a minute has no history of its renewals. It
// counts the Lease as renewed when it first saw it, so a restart never
// makes a node look dead sooner; detection of the silent node starts over
// and takes leaseStaleAfter from the start.
func TestSyncRestartStartsDetectionOver(t *testing.T) {
	now := testobj.Epoch
	e := startEnv(t, now, false, cluster(now, nil)...)
	e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Fatalf("requests right after the start: %+v, want none", rs)
	}
	e.Clock.SetTime(now.Add(20*time.Second - time.Millisecond))
	e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Fatalf("requests before leaseStaleAfter since the start: %+v, want none", rs)
	}
	e.Clock.SetTime(now.Add(20 * time.Second))
	e.sync("n1")
	e.wantPhase("n1", "Pending")
}

// TestSyncNodeClockSkew: n2's kubelet renews every 10 s with a clock 30 s
// behind the controller's (each renewTime looks 30 s old when written); it
// is never a candidate and never counts against the storm guard. n1's
// kubelet stopped with a clock 30 s ahead: it is a candidate exactly
// leaseStaleAfter after its last renewal was seen, as if its clock agreed.
func TestSyncNodeClockSkew(t *testing.T) {
	now := testobj.Epoch
	e := startEnv(t, now, false, cluster(now, nil)...)
	e.renewLeaseAt("n1", now.Add(30*time.Second))
	for at := now; !at.After(now.Add(time.Minute)); at = at.Add(10 * time.Second) {
		e.Clock.SetTime(at)
		e.renewLeaseAt("n2", at.Add(-30*time.Second))
		e.renewLeaseAt("n3", at)
		e.sync("n2")
		if rs := e.requests("n2"); len(rs) != 0 {
			t.Fatalf("at +%s: n2, healthy with its clock 30 s behind, has requests %+v", at.Sub(now), rs)
		}
		switch since := at.Sub(now); {
		case since < 20*time.Second:
			e.sync("n1")
			if rs := e.requests("n1"); len(rs) != 0 {
				t.Fatalf("at +%s: n1 has requests %+v before leaseStaleAfter since its last renewal was seen", since, rs)
			}
		case since == 20*time.Second:
			e.sync("n1")
			e.wantPhase("n1", "Pending")
		}
	}
}
