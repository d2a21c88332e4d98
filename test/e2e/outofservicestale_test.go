package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestOutOfServiceStaleBootRecord: with out-of-service taint removal on,
// the boot ID recorded under one out-of-service taint proves nothing for a
// later one. Episode 1: node A dies, an operator taints it, the controller
// records its boot ID, db-0 fails over. While the controller is down the
// operator removes that taint, node A reboots and comes back, and later
// gets a second out-of-service taint while it is Ready. The record left
// from episode 1 holds an older boot ID than the node's current one; the
// restarted controller must not take that as proof of a reboot and must
// keep the second taint (while it does remove the taint of another node
// that it saw go down and come back rebooted). Only a new power cycle
// under the second taint lets it go.
func TestOutOfServiceStaleBootRecord(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		ControllerArgs: []string{"--remove-out-of-service-taint"},
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	client := s.w.Cluster.Client()
	record := func(ctx context.Context, node string) string {
		return s.node(ctx, node).Annotations[names.BootIDAnnotation]
	}

	// Episode 1.
	s.powerOff(nodeA)
	boot1, err := s.w.Cluster.BootID(s.ctx, nodeA)
	must(t, err)
	moved := s.outOfService(nodeA)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	var stale string
	must(t, world.WaitFor(s.ctx, failoverTimeout, "boot ID of "+nodeA+" recorded", func(ctx context.Context) (bool, error) {
		stale = record(ctx, nodeA)
		return strings.HasPrefix(stale, boot1+"@"), nil
	}))

	// The controller is down; the operator ends episode 1 by hand and the
	// node reboots.
	s.w.Controller.Stop(5 * time.Second)
	s.timeline.Add(time.Now(), "fenceline-controller stopped")
	must(t, s.w.RemoveTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key))
	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.waitNodeCleanedUp(nodeA)
	// timeAdded has one-second resolution; a real second episode starts
	// in a later second than the first.
	_, at, _ := strings.Cut(stale, "@")
	first, err := time.Parse(time.RFC3339, at)
	must(t, err)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a later second than the first taint", func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(first), nil
	}))
	// Episode 2: tainted while Ready, so never seen down under this taint.
	must(t, s.w.AddTaint(s.ctx, nodeA, world.OutOfServiceTaint))
	s.timeline.Add(time.Now(), "second out-of-service taint added to %s (Ready)", nodeA)
	if got := record(s.ctx, nodeA); got != stale {
		t.Fatalf("setup: record changed from %q to %q while the controller was down", stale, got)
	}

	// Barrier: node C goes down and comes back rebooted under its own
	// taint; the restarted controller removes that one.
	nodeC := otherNode(s.w, nodeA)
	if nodeC == moved.Spec.NodeName {
		for _, n := range s.w.Nodes {
			if n != nodeA && n != moved.Spec.NodeName {
				nodeC = n
			}
		}
	}
	_, err = s.w.StartControllerReplica(s.ctx)
	must(t, err)
	s.timeline.Add(time.Now(), "fenceline-controller started again")
	must(t, s.w.PowerOff(s.ctx, nodeC))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeC, corev1.ConditionUnknown, nodeLostTimeout))
	must(t, s.w.AddTaint(s.ctx, nodeC, world.OutOfServiceTaint))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "boot ID of "+nodeC+" recorded", func(ctx context.Context) (bool, error) {
		return record(ctx, nodeC) != "", nil
	}))
	must(t, s.w.PowerOn(s.ctx, nodeC))
	s.waitUntainted(nodeC, world.OutOfServiceTaint.Key)

	if has, err := s.w.HasTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key); err != nil || !has {
		t.Fatalf("second out-of-service taint removed from %s (err %v) on the strength of the boot ID %q recorded for the first", nodeA, err, stale)
	}
	n, err := client.CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{})
	must(t, err)
	if n.Status.NodeInfo.BootID == boot1 {
		t.Fatalf("setup: %s did not get a new boot ID on power-on", nodeA)
	}

	// A real power cycle under the second taint proves the reboot.
	s.powerOff(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "boot ID of "+nodeA+" recorded for the second taint", func(ctx context.Context) (bool, error) {
		r := record(ctx, nodeA)
		return r != "" && r != stale, nil
	}))
	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.waitUntainted(nodeA, world.OutOfServiceTaint.Key)
}
