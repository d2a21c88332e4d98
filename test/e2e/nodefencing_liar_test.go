package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// TestNodeFencingBMCReadsOffWhileOn is the worst liar: the BMC accepts the
// power-off, leaves the node running and reads Off. Nothing above the BMC
// can tell at the fence, so the node is taken for fenced; the second line
// holds: the volume is detached with fence=true before it moves, so none
// of the still-running node's writes is accepted after the storage fence.
// When the node then comes back with the boot ID it had (it never
// stopped), the lie is caught: condition fenceline.io/LyingFence=True, a
// Warning Event, Recovered=False with reason LyingFence; and it stays
// fenced: out of service, request Fenced.
func TestNodeFencingBMCReadsOffWhileOn(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	bmc := s.setup.BMCs[nodeA]
	must(t, bmc.SetFaults(world.BMCFaults{StaysOn: true}))
	bmc.Redfish.SetStaleReads("Off", 1<<20)

	s.hang(nodeA)
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	// The node never stopped: its writes go on, and the storage refuses them.
	must(t, world.WaitFor(s.ctx, startTimeout, "a write of "+nodeA+" refused after the fence", func(context.Context) (bool, error) {
		_, refused := kubelet.Accepted(s.w.NodeWrites(nodeA), time.Now().Add(-2*time.Second))
		return refused > 0, nil
	}))
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)

	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	must(t, world.WaitFor(s.ctx, nodeLostTimeout, "request "+req.Name+" to call the fence a lie", func(ctx context.Context) (bool, error) {
		r, err := s.setup.Client.FencingV1alpha1().FencingRequests().Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		c := meta.FindStatusCondition(r.Status.Conditions, fencingv1alpha1.FencingRequestRecovered)
		return c != nil && c.Reason == nodefencing.ReasonLyingFence, nil
	}))
	if st, err := s.w.NodeCondition(s.ctx, nodeA, names.LyingFenceCondition); err != nil || st != corev1.ConditionTrue {
		t.Fatalf("%s %s = %q (err %v), want True", nodeA, names.LyingFenceCondition, st, err)
	}
	must(t, world.WaitFor(s.ctx, startTimeout, "a Warning "+nodefencing.EventLyingFence+" Event on "+nodeA, func(ctx context.Context) (bool, error) {
		evs, err := s.w.Cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + nodefencing.EventLyingFence})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == nodeA {
				return true, nil
			}
		}
		return false, nil
	}))
	r, err := s.setup.Client.FencingV1alpha1().FencingRequests().Get(s.ctx, req.Name, metav1.GetOptions{})
	must(t, err)
	if r.Status.Phase != fencingv1alpha1.FencingPhaseFenced {
		t.Fatalf("request %s is %s after the node came back with the same boot ID, want Fenced", r.Name, r.Status.Phase)
	}
	if tainted, err := s.w.HasTaint(s.ctx, nodeA, names.OutOfServiceTaint); err != nil || !tainted {
		t.Fatalf("%s out of service = %v (err %v) after coming back with the same boot ID, want still tainted", nodeA, tainted, err)
	}
}

// TestNodeFencingCredentialsRejectedNamed: the BMC refuses the fence
// agent's credentials (its password was changed). The request fails, and
// its message says so: the cause, not only that every round failed.
func TestNodeFencingCredentialsRejectedNamed(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.StormGuard.MaxAttempts = 2
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	must(t, s.setup.BMCs[nodeA].SetFaults(world.BMCFaults{RejectAuth: true}))

	s.hang(nodeA)
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFailed, 2*fenceTimeout)
	must(t, err)
	const cause = "credentials rejected by the fence device"
	if !strings.Contains(req.Status.ErrorMessage, cause) {
		t.Fatalf("request %s failed with %q; want it to name the cause %q", req.Name, req.Status.ErrorMessage, cause)
	}
	c := meta.FindStatusCondition(req.Status.Conditions, fencingv1alpha1.FencingRequestFailed)
	if c == nil || !strings.Contains(c.Message, cause) {
		t.Fatalf("request %s condition Failed = %+v; want its message to name %q", req.Name, c, cause)
	}
}

// assertNoLieWarning checks that an honest fence of node was never taken
// for a live node: no LyingFence Event, and no Warning that it was "Ready
// with the boot ID it had" (a Ready condition read from before the fence).
func (s *fencingScenario) assertNoLieWarning(node string) {
	s.t.Helper()
	evs, err := s.w.Cluster.Client().CoreV1().Events("").List(s.ctx, metav1.ListOptions{FieldSelector: "type=" + corev1.EventTypeWarning})
	must(s.t, err)
	for _, ev := range evs.Items {
		if !strings.HasPrefix(ev.InvolvedObject.Name, node) {
			continue
		}
		if ev.Reason == nodefencing.EventLyingFence || strings.Contains(ev.Message, "with the boot ID it had when") {
			s.t.Errorf("an honest fence of %s got the Warning %s on %s %s: %s", node, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message)
		}
	}
}
