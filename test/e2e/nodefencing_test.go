package e2e

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// fenceTimeout bounds detection plus a verified power-off in the test
// cluster (a Lease stale for 5 s, a BMC that answers at once).
const fenceTimeout = 60 * time.Second

// fencingScenario is a scenario whose nodes have BMCs and a FencePolicy.
type fencingScenario struct {
	*scenario
	setup *world.FencingSetup
}

func newFencingScenario(t *testing.T, kind world.BMCKind, edit func(*fencingv1alpha1.FencePolicy)) *fencingScenario {
	t.Helper()
	s := newScenario(t, world.Options{Fencing: true})
	setup, err := s.w.SetUpFencing(s.ctx, kind, s.timeline, edit)
	must(t, err)
	t.Cleanup(setup.Close)
	return &fencingScenario{scenario: s, setup: setup}
}

// hang stops node's heartbeats while its pods keep writing (a hung
// kubelet or a partition: from the control plane, a dead node), and
// starts the clock of the failover.
func (s *fencingScenario) hang(node string) {
	s.t.Helper()
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s stops heartbeating; its pod keeps writing", node)
	must(s.t, s.w.Partition(s.ctx, node))
}

// TestNodeFencingFailover is the whole story with no human: a node stops
// heartbeating while its database keeps writing; node-fencing detects it
// from its Lease, the fence agent powers it off through its Redfish BMC
// and reads Off back, the node is put out of service, the pod is replaced
// on another node with its volume fenced off the old one first, and no
// write of the old node is accepted after the fence. The node is then
// powered on through its BMC, comes back with a new boot ID, and is
// unfenced: schedulable, no Fenceline taint, conditions cleared.
func TestNodeFencingFailover(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	nodeA := s.startDB().Spec.NodeName
	req := s.fenceAndMove(nodeA)
	if st, err := s.w.NodeCondition(s.ctx, nodeA, names.FencingCompleteCondition); err != nil || st != corev1.ConditionTrue {
		t.Fatalf("node %s FencingComplete = %q (err %v), want True", nodeA, st, err)
	}
	// The node comes back (a human or a reboot action powers it on): new
	// boot ID, then unfenced with no human.
	rec := s.powerOnUnfenced(nodeA)
	if rec.UID != req.UID {
		t.Fatalf("request %s Recovered, want %s (the one that fenced)", rec.Name, req.Name)
	}
	if n := len(mustRequests(t, s, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want exactly 1 (no duplicate)", n, nodeA)
	}
	s.assertNoLieWarning(nodeA)
}

// fenceAndMove stops node's heartbeats while db-0 writes there, waits for
// its FencingRequest Fenced with a read-back proof, then for db-0 moved
// with its volume fenced off node first (assertMovedFenced). It returns
// the request.
func (s *fencingScenario) fenceAndMove(node string) *fencingv1alpha1.FencingRequest {
	s.t.Helper()
	s.hang(node)
	req, err := s.setup.WaitRequestPhase(s.ctx, node, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(s.t, err)
	// API times have a resolution of a second: the moment the test saw
	// the request Fenced is a bound after the verified power-off.
	seenFenced := time.Now()
	s.timeline.Add(seenFenced, "FencingRequest %s seen Fenced", req.Name)
	checkProof(s.t, req, s.setup.BMCs[node])
	s.assertMovedFenced(node, seenFenced)
	return req
}

// powerOnUnfenced powers node on through its BMC (new boot ID) and waits
// for a FencingRequest of it Recovered and the node unfenced; it returns
// that request.
func (s *fencingScenario) powerOnUnfenced(node string) *fencingv1alpha1.FencingRequest {
	s.t.Helper()
	dev, err := s.setup.BMCs[node].Device()
	must(s.t, err)
	must(s.t, dev.On(s.ctx))
	rec, err := s.setup.WaitRequestPhase(s.ctx, node, fencingv1alpha1.FencingPhaseRecovered, failoverTimeout)
	must(s.t, err)
	s.assertUnfenced(node)
	return rec
}

// assertMovedFenced waits for db-0 Running on another node than oldNode,
// writing to its volume, and checks the driver's audit log: the volume was
// fenced off oldNode before it moved, no write of oldNode was accepted
// after fenced (when the test saw the node fenced), never two writers.
func (s *fencingScenario) assertMovedFenced(oldNode string, fenced time.Time) *corev1.Pod {
	s.t.Helper()
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", oldNode, failoverTimeout)
	must(s.t, err)
	s.timeline.Add(time.Now(), "db-0 Running on %s", moved.Spec.NodeName)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertNoWriteAfterFence(oldNode, moved.Spec.NodeName, fenced)
	s.assertInvariant(oldNode, moved.Spec.NodeName)
	return moved
}

// checkProof checks that the request's proof is a read-back Off of the
// BMC, which did receive a power-off.
func checkProof(t *testing.T, req *fencingv1alpha1.FencingRequest, bmc *world.BMC) {
	t.Helper()
	must(t, world.CheckFenceProof(req, bmc))
}

// assertNoWriteAfterFence checks the driver's audit log: the volume was
// unpublished from oldNode with fence=true before it was published to
// newNode, and no write of oldNode was accepted after the verified
// power-off.
func (s *fencingScenario) assertNoWriteAfterFence(oldNode, newNode string, fencedAt time.Time) {
	s.t.Helper()
	must(s.t, s.w.CheckNoWriteAfterFence(s.handle, oldNode, newNode, fencedAt))
}

// assertUnfenced waits until node carries none of node-fencing's taints
// and its fencing conditions are False.
func (s *fencingScenario) assertUnfenced(node string) {
	s.t.Helper()
	must(s.t, s.w.WaitUnfenced(s.ctx, node, nodeLostTimeout))
}

// TestNodeFencingLyingBMC: the BMC accepts every power-off and leaves the
// node on. The request never becomes Fenced, runs out of attempts and is
// Failed; nothing is put out of service and the pod is not moved.
func TestNodeFencingLyingBMC(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.StormGuard.MaxAttempts = 2
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	bmc := s.setup.BMCs[nodeA]
	must(t, bmc.SetFaults(world.BMCFaults{StaysOn: true}))

	s.hang(nodeA)
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFailed, 2*fenceTimeout)
	must(t, err)
	if req.Status.FencedTime != nil || slices.ContainsFunc(req.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool { return a.Result == fencingv1alpha1.FenceAttemptSucceeded }) {
		t.Fatalf("lying BMC: request %s has a fence on record: %+v", req.Name, req.Status)
	}
	if !slices.ContainsFunc(bmc.PowerCommands(), func(c world.PowerCommand) bool { return c.OK && c.Action == "ForceOff" }) {
		t.Fatalf("the BMC of %s accepted no ForceOff: the test proves nothing", nodeA)
	}
	if tainted, err := s.w.HasTaint(s.ctx, nodeA, names.OutOfServiceTaint); err != nil || tainted {
		t.Fatalf("%s out of service = %v (err %v) after a fence that was never verified", nodeA, tainted, err)
	}
	if st, err := s.w.NodeCondition(s.ctx, nodeA, names.FencingCompleteCondition); err != nil || st == corev1.ConditionTrue {
		t.Fatalf("%s FencingComplete = %q (err %v), want not True", nodeA, st, err)
	}
	if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || (p != nil && p.Spec.NodeName != nodeA) {
		t.Fatalf("db-0 = %v (err %v): it moved off %s without a verified fence", p, err, nodeA)
	}
	if n := len(mustRequests(t, s, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want 1: a Failed request is not retried by a new one", n, nodeA)
	}
}

// TestNodeFencingHeartbeatBlip: a node misses heartbeats for less than the
// policy's leaseStaleAfter and comes back; nothing is fenced. To prove a
// negative without a fixed wait, another node then hangs for good: once
// its request exists the controller has looked past the moment the blip
// would have counted, and the blipped node must still have none.
func TestNodeFencingHeartbeatBlip(t *testing.T) {
	t.Parallel()
	const staleAfter = 15 * time.Second
	s := newFencingScenario(t, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.Detection.LeaseStaleAfter = &metav1.Duration{Duration: staleAfter}
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	s.hang(nodeA)
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	gap := time.Since(s.t0)
	if gap >= staleAfter {
		t.Fatalf("the blip lasted %s, not shorter than leaseStaleAfter %s: the test proves nothing", gap, staleAfter)
	}
	nodeB := otherNode(s.w, nodeA)
	s.hang(nodeB)
	if _, err := s.setup.WaitRequestPhase(s.ctx, nodeB, fencingv1alpha1.FencingPhaseFenced, fenceTimeout); err != nil {
		t.Fatal(err)
	}
	if reqs := mustRequests(t, s, nodeA); len(reqs) != 0 {
		t.Fatalf("a heartbeat blip of %s on %s created %d FencingRequests", gap.Round(time.Millisecond), nodeA, len(reqs))
	}
	if !s.setup.BMCs[nodeA].PoweredOn() {
		t.Fatalf("%s was powered off after a blip", nodeA)
	}
}

func mustRequests(t *testing.T, s *fencingScenario, node string) []fencingv1alpha1.FencingRequest {
	t.Helper()
	reqs, err := s.setup.FencingRequests(s.ctx, node)
	must(t, err)
	return reqs
}
