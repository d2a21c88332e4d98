package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/fencecoverage"
	"fenceline.io/fenceline/test/world"
)

// coverageTimeout bounds each change of coverage: a probe (every 5 s in
// the test world) and the controller's coalescing delay.
const coverageTimeout = 60 * time.Second

// TestFenceCoverage: every node of a fencing world is covered; a node that
// loses its FenceTarget, and one whose BMC starts rejecting its
// credentials, are listed in the policy's status with their reason and a
// Warning Event, while every node still runs; each is covered again once
// repaired. No node is fenced along the way.
func TestFenceCoverage(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	policy := s.setup.Policy.Name
	s.waitCoverage(policy, "every node covered", func(c *fencingv1alpha1.FenceCoverage) bool {
		return c.SelectedNodes == int32(len(s.w.Nodes)) && c.UncoveredNodes == 0
	})

	gone, rejecting := s.w.Nodes[0], s.w.Nodes[1]
	target, err := s.setup.Client.FencingV1alpha1().FenceTargets().Get(s.ctx, gone, metav1.GetOptions{})
	must(t, err)
	must(t, s.setup.Client.FencingV1alpha1().FenceTargets().Delete(s.ctx, gone, metav1.DeleteOptions{}))
	must(t, s.setup.BMCs[rejecting].SetFaults(world.BMCFaults{RejectAuth: true}))
	s.timeline.Add(time.Now(), "FenceTarget %s deleted; BMC of %s rejects its credentials", gone, rejecting)
	s.waitCoverage(policy, gone+" and "+rejecting+" uncovered", func(c *fencingv1alpha1.FenceCoverage) bool {
		return c.UncoveredNodes == 2 && reasonOf(c, gone) == fencecoverage.ReasonNoFenceTarget && reasonOf(c, rejecting) == "CredentialsRejected"
	})
	s.waitEvent(policy, fencecoverage.EventNodeNotFenceable, gone)
	s.waitEvent(policy, fencecoverage.EventNodeNotFenceable, rejecting)

	target.ResourceVersion, target.UID = "", ""
	_, err = s.setup.Client.FencingV1alpha1().FenceTargets().Create(s.ctx, target, metav1.CreateOptions{})
	must(t, err)
	must(t, s.setup.BMCs[rejecting].SetFaults(world.BMCFaults{}))
	s.timeline.Add(time.Now(), "FenceTarget %s created again; BMC of %s accepts its credentials", gone, rejecting)
	s.waitCoverage(policy, "every node covered again", func(c *fencingv1alpha1.FenceCoverage) bool { return c.UncoveredNodes == 0 })
	s.waitEvent(policy, fencecoverage.EventNodeFenceable, gone)

	reqs, err := s.setup.Client.FencingV1alpha1().FencingRequests().List(s.ctx, metav1.ListOptions{})
	must(t, err)
	if len(reqs.Items) != 0 {
		t.Fatalf("%d FencingRequests; coverage must fence nothing", len(reqs.Items))
	}
}

func reasonOf(c *fencingv1alpha1.FenceCoverage, node string) string {
	i := slices.IndexFunc(c.Uncovered, func(u fencingv1alpha1.UncoveredNode) bool { return u.Node == node })
	if i < 0 {
		return ""
	}
	return c.Uncovered[i].Reason
}

// waitCoverage waits until the policy's status.coverage satisfies ok.
func (s *fencingScenario) waitCoverage(policy, what string, ok func(*fencingv1alpha1.FenceCoverage) bool) {
	s.t.Helper()
	var last *fencingv1alpha1.FenceCoverage
	err := world.WaitFor(s.ctx, coverageTimeout, "FencePolicy "+policy+": "+what, func(ctx context.Context) (bool, error) {
		p, err := s.setup.Client.FencingV1alpha1().FencePolicies().Get(ctx, policy, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p.Status.Coverage
		return last != nil && ok(last), nil
	})
	if err != nil {
		s.t.Fatalf("%v; last coverage %+v", err, last)
	}
	s.timeline.Add(time.Now(), "coverage of %s: %s", policy, what)
}

// waitEvent waits for an Event of reason on the policy that names node.
func (s *fencingScenario) waitEvent(policy, reason, node string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, coverageTimeout, fmt.Sprintf("Event %s on FencePolicy %s about %s", reason, policy, node), func(ctx context.Context) (bool, error) {
		evs, err := s.w.Cluster.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=FencePolicy,involvedObject.name=" + policy + ",reason=" + reason,
		})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, "Node "+node+" ") }), nil
	}))
}
