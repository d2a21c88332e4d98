package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/test/world"
)

// TestNodeLifecycleConditions: with fenceline-controller's
// NodeLifecycleConditions gate on, a node fenced with no human carries
// MaintenanceInProgress=True (FencelineFenced) on the real API server while
// it is fenced, and both maintenance conditions False once it is unfenced;
// an administrator's MaintenancePlanned on the node stays as it was
// throughout.
func TestNodeLifecycleConditions(t *testing.T) {
	t.Parallel()
	s := newFencingScenarioWith(t, world.Options{ControllerArgs: []string{"--feature-gates=NodeLifecycleConditions=true"}}, world.BMCRedfish, nil)
	nodeA := s.startDB().Spec.NodeName
	admins := corev1.NodeCondition{Type: corev1.NodeMaintenancePlanned, Status: corev1.ConditionTrue, Reason: "KernelUpgradeNextWeek",
		Message: "set by the cluster's administrator", LastTransitionTime: metav1.Now(), LastHeartbeatTime: metav1.Now()}
	n, err := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{})
	must(t, err)
	n.Status.Conditions = append(n.Status.Conditions, admins)
	_, err = s.w.Cluster.Client().CoreV1().Nodes().UpdateStatus(s.ctx, n, metav1.UpdateOptions{})
	must(t, err)

	s.fenceAndMove(nodeA)
	s.wantLifecycle(nodeA, "fenced", corev1.ConditionTrue, "FencelineFenced", admins)
	s.powerOnUnfenced(nodeA)
	s.wantLifecycle(nodeA, "unfenced", corev1.ConditionFalse, "FencelineNotFencing", admins)
}

// wantLifecycle checks node's MaintenanceInProgress and that its
// MaintenancePlanned is still the administrator's.
func (s *fencingScenario) wantLifecycle(node, stage string, status corev1.ConditionStatus, reason string, admins corev1.NodeCondition) {
	s.t.Helper()
	n, err := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, node, metav1.GetOptions{})
	must(s.t, err)
	var inProgress, planned *corev1.NodeCondition
	for i, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeMaintenanceInProgress:
			inProgress = &n.Status.Conditions[i]
		case corev1.NodeMaintenancePlanned:
			planned = &n.Status.Conditions[i]
		}
	}
	if inProgress == nil || inProgress.Status != status || inProgress.Reason != reason {
		s.t.Errorf("%s: node %s MaintenanceInProgress = %+v, want %s/%s", stage, node, inProgress, status, reason)
	}
	if planned == nil || planned.Status != admins.Status || planned.Reason != admins.Reason {
		s.t.Errorf("%s: node %s MaintenancePlanned = %+v, want the administrator's %s/%s untouched", stage, node, planned, admins.Status, admins.Reason)
	}
}
