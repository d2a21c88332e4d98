package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestNodeFencingSurvivesSIGKILL runs the no-human failover while
// fenceline-controller is killed with SIGKILL inside or after every step it
// takes (its triage and admission, once their first mark is on the node and
// usually before the request's phase is written; Fencing, Fenced,
// Recovering) and fenceline-fence-agent is
// killed in the middle of its power-off, each replaced by a new process as
// a Deployment would. The controller's API budget is small (2 requests per
// second) so that each kill lands between two writes of a step. Whoever
// runs next finishes the job: one request for the node, fenced by a
// read-back Off, the interrupted attempt on record as such, the pod moved
// with its volume fenced first and no write of the old node accepted after
// the fence, then unfenced after the power-on.
func TestNodeFencingSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	sc := newScenario(t, world.Options{Fencing: true, ControllerArgs: []string{"--kube-api-qps=2", "--kube-api-burst=1"}})
	setup, err := sc.w.SetUpFencing(sc.ctx, world.BMCRedfish, sc.timeline, nil)
	must(t, err)
	t.Cleanup(setup.Close)
	s := &fencingScenario{scenario: sc, setup: setup}
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	bmc := setup.BMCs[nodeA]
	// A slow BMC keeps the agent inside its power-off long enough to be
	// killed there.
	must(t, bmc.SetFaults(world.BMCFaults{Latency: 400 * time.Millisecond}))

	s.hang(nodeA)
	s.killControllerAtMark(nodeA, names.FencingTriagedTaint)
	s.killControllerAt(nodeA, fencingv1alpha1.FencingPhaseFencing)
	s.killAgentMidAttempt(nodeA)
	req := s.killControllerAt(nodeA, fencingv1alpha1.FencingPhaseFenced)
	seenFenced := time.Now()
	checkProof(t, req, bmc)

	s.assertMovedFenced(nodeA, seenFenced)

	must(t, bmc.SetFaults(world.BMCFaults{}))
	dev, err := bmc.Device()
	must(t, err)
	must(t, dev.On(s.ctx))
	s.killControllerAt(nodeA, fencingv1alpha1.FencingPhaseRecovering)
	rec, err := setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseRecovered, failoverTimeout)
	must(t, err)
	s.assertUnfenced(nodeA)
	reqs := mustRequests(t, s, nodeA)
	if len(reqs) != 1 || reqs[0].UID != rec.UID {
		t.Fatalf("%d FencingRequests for %s after the kills, want exactly the one that fenced", len(reqs), nodeA)
	}
	if !slices.ContainsFunc(rec.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
		return a.Result == fencingv1alpha1.FenceAttemptFailed && strings.Contains(a.Message, "interrupted")
	}) {
		t.Fatalf("the attempt the killed agent left unfinished is not on record as interrupted: %+v", rec.Status.Attempts)
	}
}

// killControllerAt waits until node's request is in phase (the slow API
// budget keeps each phase for seconds), kills the controller and starts
// another, and returns the request as it was seen.
func (s *fencingScenario) killControllerAt(node string, phase fencingv1alpha1.FencingPhase) *fencingv1alpha1.FencingRequest {
	s.t.Helper()
	req, err := s.setup.WaitRequestPhase(s.ctx, node, phase, fenceTimeout)
	must(s.t, err)
	s.timeline.Add(time.Now(), "request %s seen %s: SIGKILL fenceline-controller, start another", req.Name, phase)
	must(s.t, s.w.KillController(s.ctx))
	return req
}

// killControllerAtMark waits until node carries the taint a step writes
// before its request's phase, kills the controller and starts another.
func (s *fencingScenario) killControllerAtMark(node, taint string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, fenceTimeout, "taint "+taint+" on "+node, func(ctx context.Context) (bool, error) {
		return s.w.HasTaint(ctx, node, taint)
	}))
	phase := "none"
	if reqs, err := s.setup.FencingRequests(s.ctx, node); err == nil && len(reqs) > 0 {
		phase = string(reqs[0].Status.Phase)
	}
	s.timeline.Add(time.Now(), "node %s carries %s, its request's phase %q: SIGKILL fenceline-controller, start another", node, taint, phase)
	must(s.t, s.w.KillController(s.ctx))
}

// killAgentMidAttempt waits until node's request has an attempt that has
// started and not ended, and kills the fence agent then.
func (s *fencingScenario) killAgentMidAttempt(node string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, fenceTimeout, "an unfinished fence attempt on "+node, func(ctx context.Context) (bool, error) {
		reqs, err := s.setup.FencingRequests(ctx, node)
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		for _, r := range reqs {
			if slices.ContainsFunc(r.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool { return a.EndTime == nil }) {
				return true, nil
			}
		}
		return false, nil
	}))
	s.timeline.Add(time.Now(), "fence attempt under way: SIGKILL fenceline-fence-agent, start another")
	must(s.t, s.w.KillFenceAgent(s.ctx))
}
