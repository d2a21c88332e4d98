package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// powerCheckOf returns the power check asked on node's FenceTarget and
// the fence agent's answer (nil before one).
func (s *fencingScenario) powerCheckOf(ctx context.Context, node string) (string, *fencingv1alpha1.FencePowerCheck, error) {
	t, err := s.setup.Client.FencingV1alpha1().FenceTargets().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	return t.Annotations[names.PowerCheckAnnotation], t.Status.PowerCheck, nil
}

// waitPowerCheckAnswered waits for the fence agent's answer to a power
// check of node, and returns it.
func (s *fencingScenario) waitPowerCheckAnswered(node string) *fencingv1alpha1.FencePowerCheck {
	s.t.Helper()
	var got *fencingv1alpha1.FencePowerCheck
	must(s.t, world.WaitFor(s.ctx, fenceTimeout, "a power check of "+node+" answered", func(ctx context.Context) (bool, error) {
		ask, answer, err := s.powerCheckOf(ctx, node)
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		got = answer
		return ask != "" && answer != nil && answer.Token == ask, nil
	}))
	return got
}

// TestNodeFencingPowerLossSeenAtFirstMissedRenewal: the node running db-0
// loses its power. At its first missed Lease renewal the controller asks
// the fence agent to read its BMC, which reads Off: the node is a
// candidate at once (PowerOffObserved, not LeaseExpired), the fence agent
// still sends its power-off and reads Off back, and db-0 moves with its
// volume fenced off the dead node first.
func TestNodeFencingPowerLossSeenAtFirstMissedRenewal(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	nodeA := s.startDB().Spec.NodeName
	bmc := s.setup.BMCs[nodeA]
	s.timeline.Add(time.Now(), "%s loses its power", nodeA)
	must(t, bmc.PowerLoss(s.ctx))

	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	seenFenced := time.Now()
	if req.Spec.Reason != detect.ReasonPowerOffObserved {
		t.Fatalf("request %s reason %q, want %s: the power loss was not seen at the first missed renewal", req.Name, req.Spec.Reason, detect.ReasonPowerOffObserved)
	}
	ask, answer, err := s.powerCheckOf(s.ctx, nodeA)
	must(t, err)
	if answer == nil || answer.Token != ask || answer.PowerState != fencingv1alpha1.PowerStateOff {
		t.Fatalf("FenceTarget %s: ask %q, answer %+v; want Off for the ask", nodeA, ask, answer)
	}
	// The read proves nothing alone: the fence still powers off, and reads
	// Off back (checkProof).
	checkProof(t, req, bmc)
	s.assertMovedFenced(nodeA, seenFenced)
}

// TestNodeFencingPowerCheckNotOff: a power check that does not read Off
// changes nothing: a hung node whose BMC reads On, and a node whose BMC
// does not answer the check, are fenced on their stale Lease
// (LeaseExpired) as without the check.
func TestNodeFencingPowerCheckNotOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		faults     world.BMCFaults
		wantAnswer fencingv1alpha1.PowerState
	}{
		{name: "reads On", wantAnswer: fencingv1alpha1.PowerStateOn},
		{name: "unreachable", faults: world.BMCFaults{Unreachable: true}, wantAnswer: fencingv1alpha1.PowerStateUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFencingScenario(t, world.BMCRedfish, nil)
			nodeA := s.startDB().Spec.NodeName
			bmc := s.setup.BMCs[nodeA]
			must(t, bmc.SetFaults(tc.faults))
			s.hang(nodeA)
			answer := s.waitPowerCheckAnswered(nodeA)
			if answer.PowerState != tc.wantAnswer {
				t.Fatalf("power check answered %s, want %s", answer.PowerState, tc.wantAnswer)
			}
			s.timeline.Add(time.Now(), "power check of %s answered %s", nodeA, answer.PowerState)
			must(t, bmc.SetFaults(world.BMCFaults{})) // reachable again for the fence
			req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
			must(t, err)
			seenFenced := time.Now()
			if req.Spec.Reason != detect.ReasonLeaseExpired {
				t.Fatalf("request %s reason %q, want %s", req.Name, req.Spec.Reason, detect.ReasonLeaseExpired)
			}
			checkProof(t, req, bmc)
			s.assertMovedFenced(nodeA, seenFenced)
		})
	}
}

// TestNodeFencingPowerCheckStaleSensor: a hung node keeps writing while
// its BMC's power sensor reads Off. The check reads Off and the node is a
// candidate at its first missed renewal, but the read is never taken for
// a fence: the BMC receives a power-off that really stops the node before
// anything moves, and no write of the node is accepted after it.
func TestNodeFencingPowerCheckStaleSensor(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	nodeA := s.startDB().Spec.NodeName
	bmc := s.setup.BMCs[nodeA]
	must(t, bmc.SetFaults(world.BMCFaults{ReadsOff: true}))
	s.hang(nodeA)
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	seenFenced := time.Now()
	if req.Spec.Reason != detect.ReasonPowerOffObserved {
		t.Fatalf("request %s reason %q, want %s (the sensor read Off)", req.Name, req.Spec.Reason, detect.ReasonPowerOffObserved)
	}
	if !slices.ContainsFunc(bmc.PowerCommands(), func(c world.PowerCommand) bool { return c.OK && c.Action == "ForceOff" }) {
		t.Fatalf("the BMC of %s received no power-off: a sensor's Off was taken for a fence (%+v)", nodeA, bmc.PowerCommands())
	}
	if bmc.PoweredOn() {
		t.Fatalf("%s still has power after its fence", nodeA)
	}
	s.assertMovedFenced(nodeA, seenFenced)
}
