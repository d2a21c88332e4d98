package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// TestFailoverOnRealStorage runs failovers on the mock driver's tgt
// backend: every volume an iSCSI LUN on a real target, every node's
// writes stamped blocks through its own iSCSI session, and the verdict
// read off the LUN's bytes through a fresh session (world.CheckBytes),
// beside the audit-log invariant. A fence that ends the node's sessions
// (acl+sessions) or preempts its reservation (pr) keeps the bytes clean; a
// fence that only revokes the ACL (acl) lets the zombie session write on,
// and the checker must see it.
func TestFailoverOnRealStorage(t *testing.T) {
	t.Parallel()
	iscsi.RequireTgt(t)
	for _, tc := range []struct {
		name  string
		story func(*testing.T, tgt.FenceMethod)
		m     tgt.FenceMethod
	}{
		{"non-graceful shutdown, acl+sessions", nonGracefulOnTgt, tgt.MethodACLSessions},
		{"non-graceful shutdown, acl is no fence", nonGracefulOnTgt, tgt.MethodACL},
		{"safe-detach partition that heals, pr", partitionHealsOnTgt, tgt.MethodPR},
		{"safe-detach partition, acl is no fence", partitionHealsOnTgt, tgt.MethodACL},
		{"node fencing with no human, acl+sessions", nodeFencingOnTgt, tgt.MethodACLSessions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.story(t, tc.m)
		})
	}
}

// nodeFencingOnTgt: a node stops heartbeating while its session keeps
// writing; node fencing powers it off through its BMC, the volume is
// fenced off it and moves, with no human.
func nodeFencingOnTgt(t *testing.T, method tgt.FenceMethod) {
	s := newFencingScenarioWith(t, world.Options{Driver: world.TgtDriver(method, world.DriverOptions{})}, world.BMCRedfish, nil)
	nodeA := s.startDB().Spec.NodeName
	s.hang(nodeA)
	_, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertInvariant(nodeA, moved.Spec.NodeName)
	s.assertBytesClean()
}

// nonGracefulOnTgt: the node loses power and its zombie keeps writing
// through its session; the operator's out-of-service taint moves the pod;
// the driver crashes and comes back; the node returns and cleans up.
func nonGracefulOnTgt(t *testing.T, method tgt.FenceMethod) {
	s := newScenario(t, world.Options{ZombieWrites: true, Driver: world.TgtDriver(method, world.DriverOptions{})})
	nodeA := s.startDB().Spec.NodeName
	s.powerOff(nodeA)
	moved := s.outOfService(nodeA)
	if !s.judgeMove(method, nodeA, moved.Spec.NodeName) {
		return
	}

	// The array's plugin crashes: its restarted target serves the same
	// portal, the new node logs in again and writes on, and the fenced
	// node, still powered off and writing, stays out.
	must(t, s.w.KillDriver(s.ctx))
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertBytesClean()

	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.waitNodeCleanedUp(nodeA)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertBytesClean()
}

// partitionHealsOnTgt: a safe-detach driver's node is partitioned (same
// boot, its session and writer intact), quarantined and its pod moved with
// a fenced detach; the partition heals, the node cleans up, and the volume
// moves back to it: its new session writes again, and the bytes stay
// clean throughout. With acl the partitioned node's session writes on
// after the fence, and the checker must say so.
func partitionHealsOnTgt(t *testing.T, method tgt.FenceMethod) {
	s := newScenario(t, world.Options{
		Driver:         world.TgtDriver(method, world.DriverOptions{SafeDetach: true}),
		ControllerArgs: []string{"--quarantine-delay=2s"},
	})
	nodeA := s.startDB().Spec.NodeName
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s partitioned", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	if !s.judgeMove(method, nodeA, moved.Spec.NodeName) {
		return
	}

	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	s.timeline.Add(time.Now(), "partition of %s healed", nodeA)
	s.waitNodeCleanedUp(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+nodeA, func(ctx context.Context) (bool, error) {
		q, err := s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
		return err == nil && !q, nil
	}))
	s.moveBack(nodeA)
	s.assertBytesClean()
}

// judgeMove judges the move of the db volume from oldNode to newNode on
// the target. With acl the zombie writes on, and the byte checker must say
// so (assertACLCaught); false: the story ends there. Otherwise the
// zombie's writes after the fence are refused, the new node's accepted,
// and the audit invariant and the bytes hold.
func (s *scenario) judgeMove(method tgt.FenceMethod, oldNode, newNode string) bool {
	s.t.Helper()
	if method == tgt.MethodACL {
		s.assertACLCaught(oldNode, newNode)
		return false
	}
	s.assertZombieRefused(oldNode)
	s.waitAcceptedWrite(newNode, time.Now())
	s.assertInvariant(oldNode, newNode)
	s.assertBytesClean()
	return true
}

// assertACLCaught: with acl the fence only revoked the ACL, and oldNode's
// session outlives it. Once it has written on after the fence and the new
// node has written too, the byte checker must find the zombie's blocks.
func (s *scenario) assertACLCaught(oldNode, newNode string) {
	s.t.Helper()
	s.waitAcceptedWrite(newNode, time.Now())
	fence := s.fenceTime(oldNode)
	s.waitAcceptedWrite(oldNode, fence.Add(2*time.Second))
	v := s.checkBytes()
	if len(v.Violations) == 0 {
		s.t.Fatalf("the byte checker found nothing although %s's session wrote on after the fence (%d writes, %d acknowledged)", oldNode, v.Sent, v.Acked)
	}
	s.t.Logf("as expected, acl is no fence: %d bad blocks, first: %s", len(v.Violations), v.Violations[0])
}

// fenceTime is when the driver recorded the first fenced unpublish of the
// db volume from node since it was last published there.
func (s *scenario) fenceTime(node string) time.Time {
	s.t.Helper()
	var at time.Time
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "a fenced unpublish from "+node, func(context.Context) (bool, error) {
		recs := s.audit()
		if i := s.fenceIndex(recs, node); i >= 0 {
			at = recs[i].Time
			return true, nil
		}
		return false, nil
	}))
	return at
}

// assertZombieRefused waits until a write of node's old session, sent
// after the fence, was refused by the target: the zombie kept trying, so
// "nothing acknowledged" is not vacuous.
func (s *scenario) assertZombieRefused(node string) {
	s.t.Helper()
	fence := s.fenceTime(node)
	must(s.t, world.WaitFor(s.ctx, 20*time.Second, "a refused write of "+node+" after the fence", func(context.Context) (bool, error) {
		accepted, refused := kubelet.SentAfter(s.w.NodeWrites(node), fence)
		if accepted > 0 {
			return false, fmt.Errorf("%d writes of %s sent after the fence were acknowledged", accepted, node)
		}
		return refused > 0, nil
	}))
}

// checkBytes runs the byte checker and returns the db volume's verdict.
func (s *scenario) checkBytes() world.ByteVerdict {
	s.t.Helper()
	vs, err := s.w.CheckBytes(s.ctx)
	must(s.t, err)
	for _, v := range vs {
		if v.Volume == s.handle {
			return v
		}
	}
	s.t.Fatalf("the byte checker judged %v, not the db volume %s: no stamped writes reached it", vs, s.handle)
	return world.ByteVerdict{}
}

// assertBytesClean fails the test on any violation the byte checker finds
// on the db volume, and unless some fence and acknowledged writes were
// judged.
func (s *scenario) assertBytesClean() {
	s.t.Helper()
	v := s.checkBytes()
	if len(v.Violations) > 0 {
		s.t.Fatalf("two writers on the bytes of %s: %d violations:\n%s", s.handle, len(v.Violations), strings.Join(v.Violations, "\n"))
	}
	if v.Fences == 0 || v.Acked == 0 {
		s.t.Fatalf("the byte checker judged %d acknowledged writes against %d fences: nothing to judge", v.Acked, v.Fences)
	}
	s.t.Logf("bytes of %s clean: %d writes sent, %d acknowledged, %d fences", s.handle, v.Sent, v.Acked, v.Fences)
}
