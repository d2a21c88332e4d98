package deploy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestReplicatedDeploymentsHaveADisruptionBudget: every Deployment of
// deploy/ that runs more than one replica (the controller and the fence
// agent, each behind a Lease) has a PodDisruptionBudget in its namespace
// that selects its pods and lets at most one go at a time, so a drain
// never takes both the leader and its standby.
func TestReplicatedDeploymentsHaveADisruptionBudget(t *testing.T) {
	objs := render(t, "deploy")
	var pdbs []unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			pdbs = append(pdbs, o)
		}
	}
	checked := 0
	for _, d := range objs {
		replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
		if d.GetKind() != "Deployment" || replicas < 2 {
			continue
		}
		checked++
		podLabels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if !hasBudget(t, pdbs, d.GetNamespace(), podLabels) {
			t.Errorf("Deployment %s/%s runs %d replicas and no PodDisruptionBudget with maxUnavailable 1 selects its pods", d.GetNamespace(), d.GetName(), replicas)
		}
	}
	if checked < 2 {
		t.Fatalf("deploy/ renders %d Deployments with several replicas, want the controller and the fence agent", checked)
	}
}

func hasBudget(t *testing.T, pdbs []unstructured.Unstructured, namespace string, podLabels map[string]string) bool {
	t.Helper()
	for _, p := range pdbs {
		if p.GetNamespace() != namespace {
			continue
		}
		sel, _, _ := unstructured.NestedMap(p.Object, "spec", "selector")
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(sel, &ls, true); err != nil {
			t.Fatalf("PodDisruptionBudget %s: selector: %v", p.GetName(), err)
		}
		s, err := metav1.LabelSelectorAsSelector(&ls)
		if err != nil || s.Empty() || !s.Matches(labels.Set(podLabels)) {
			continue
		}
		if max, found, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "maxUnavailable"); found && (max == int64(1) || max == "1") {
			return true
		}
	}
	return false
}
