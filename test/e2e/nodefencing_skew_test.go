package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/test/world"
)

// nodeClockSkew is how far behind the controller's clock the skewed
// node's kubelet stamps its renewals: beyond every leaseStaleAfter of the
// test cluster.
const nodeClockSkew = 30 * time.Second

// TestNodeFencingSkewedClockNotFenced: a healthy node whose clock runs 30 s
// behind renews its Lease as often as any, but every renewTime it writes
// looks 30 s old on the controller's clock. Node fencing judges the Lease
// by when it saw it renewed, so the node is never a candidate, while
// another node that really stops is fenced as usual.
func TestNodeFencingSkewedClockNotFenced(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	skewed, dead := s.w.Nodes[0], s.w.Nodes[1]
	stop := s.skewLease(skewed, -nodeClockSkew)
	defer stop()
	s.timeline.Add(time.Now(), "node %s renews its Lease with a clock %s behind", skewed, nodeClockSkew)

	s.hang(dead)
	must(t, world.WaitFor(s.ctx, fenceTimeout, dead+" fenced, "+skewed+" not a candidate", func(ctx context.Context) (bool, error) {
		if reqs, err := s.setup.FencingRequests(ctx, skewed); err != nil || len(reqs) != 0 {
			if err == nil {
				err = fmt.Errorf("%s, healthy with a clock %s behind, got FencingRequest %s (%s)", skewed, nodeClockSkew, reqs[0].Name, reqs[0].Spec.Reason)
			}
			return false, err
		}
		reqs, err := s.setup.FencingRequests(ctx, dead)
		return err == nil && slices.ContainsFunc(reqs, func(r fencingv1alpha1.FencingRequest) bool {
			return r.Status.Phase == fencingv1alpha1.FencingPhaseFenced
		}), err
	}))
	if !s.setup.BMCs[skewed].PoweredOn() || len(s.setup.BMCs[skewed].PowerCommands()) != 0 {
		t.Fatalf("the BMC of %s, healthy with a skewed clock, received %+v", skewed, s.setup.BMCs[skewed].PowerCommands())
	}
}

// skewLease renews node's Lease every half second with renewTime off the
// real time by skew, as a kubelet on a node with a skewed clock does,
// beside the renewals of the node's own stand-in. It returns a function
// that stops the renewals and waits for them to end.
func (s *fencingScenario) skewLease(node string, skew time.Duration) (stop func()) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.ctx)
	leases := s.w.Cluster.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(skew)}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		})
	}
	must(s.t, renew())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = renew() // a missed renewal is retried at the next tick
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
