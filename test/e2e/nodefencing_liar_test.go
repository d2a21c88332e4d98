package e2e

import (
	"context"
	"testing"
	"time"

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
// can tell, so the node is taken for fenced; the second line holds: the
// volume is detached with fence=true before it moves, so none of the
// still-running node's writes is accepted after the storage fence. When
// the node then comes back with the boot ID it had (it never stopped), it
// stays fenced: out of service, request Fenced, Recovered=False with
// reason SameBootID.
func TestNodeFencingBMCReadsOffWhileOn(t *testing.T) {
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
		_, refused := kubelet.Accepted(s.w.Kubelets[nodeA].Writes(), time.Now().Add(-2*time.Second))
		return refused > 0, nil
	}))
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)

	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	must(t, world.WaitFor(s.ctx, nodeLostTimeout, "request "+req.Name+" to say the boot ID did not change", func(ctx context.Context) (bool, error) {
		r, err := s.setup.Client.FencingV1alpha1().FencingRequests().Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		c := meta.FindStatusCondition(r.Status.Conditions, fencingv1alpha1.FencingRequestRecovered)
		return c != nil && c.Reason == nodefencing.ReasonSameBootID, nil
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
