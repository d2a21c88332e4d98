package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestOutOfServiceAppliedByAnotherFencer: another fencer (OpenShift's
// Pacemaker-based fencing) applies the out-of-service taint to a dead node
// and marks it with node.kubernetes.io/out-of-service-applied-by. The
// failover goes on as under an operator's taint (fenced detach first), but
// when the node comes back rebooted, the out-of-service remover leaves
// that taint to the fencer that applied it, while it removes the
// operator's taint of another node that went down and came back the same
// way (the barrier that shows it looked).
func TestOutOfServiceAppliedByAnotherFencer(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		ControllerArgs: []string{"--remove-out-of-service-taint"},
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	s.powerOff(nodeA)
	must(t, s.w.AddTaintAppliedBy(s.ctx, nodeA, world.OutOfServiceTaint, "pacemaker"))
	s.timeline.Add(s.t0, "out-of-service taint applied to %s by pacemaker", nodeA)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)

	// The barrier node: down under an operator's taint, whose boot ID the
	// remover records.
	var nodeC string
	for _, n := range s.w.Nodes {
		if n != nodeA && n != moved.Spec.NodeName {
			nodeC = n
		}
	}
	must(t, s.w.PowerOff(s.ctx, nodeC))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeC, corev1.ConditionUnknown, nodeLostTimeout))
	must(t, s.w.AddTaint(s.ctx, nodeC, world.OutOfServiceTaint))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "boot ID of "+nodeC+" recorded", func(ctx context.Context) (bool, error) {
		return s.node(ctx, nodeC).Annotations[names.BootIDAnnotation] != "", nil
	}))

	// Both come back rebooted, node A first.
	must(t, s.w.PowerOn(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionTrue, nodeLostTimeout))
	must(t, s.w.PowerOn(s.ctx, nodeC))
	s.waitUntainted(nodeC, world.OutOfServiceTaint.Key)

	n := s.node(s.ctx, nodeA)
	if has, err := s.w.HasTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key); err != nil || !has {
		t.Fatalf("the out-of-service taint pacemaker applied to %s was removed (err %v)", nodeA, err)
	}
	if got := n.Annotations[names.OutOfServiceAppliedByAnnotation]; got != "pacemaker" {
		t.Errorf("%s annotation on %s is %q, want pacemaker's mark kept", names.OutOfServiceAppliedByAnnotation, nodeA, got)
	}
	for _, a := range []string{names.BootIDAnnotation, names.OutOfServiceOwnerAnnotation} {
		if v, ok := n.Annotations[a]; ok {
			t.Errorf("%s carries %s=%q: Fenceline took another fencer's taint for its own", nodeA, a, v)
		}
	}
}
