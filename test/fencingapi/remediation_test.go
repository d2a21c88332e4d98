package fencingapi

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
)

// testRemediationShapes creates a FencelineRemediationTemplate and a
// FencelineRemediation the way NodeHealthCheck does (spec.template.spec
// copied, named after the node, in the template's namespace, owned by the
// NodeHealthCheck, the node-name annotation), writes the contract's
// conditions through the status subresource, and reads both back as the
// checkers read them: unstructured, by path.
func testRemediationShapes(t *testing.T, cs versioned.Interface) {
	ctx := t.Context()
	api := cs.FencingV1alpha1()
	create := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	const ns = "default"

	tmpl, err := api.FencelineRemediationTemplates(ns).Create(ctx, &fencingv1alpha1.FencelineRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "fenceline"},
		Spec: fencingv1alpha1.FencelineRemediationTemplateSpec{Template: fencingv1alpha1.FencelineRemediationTemplateResource{
			Spec: fencingv1alpha1.FencelineRemediationSpec{},
		}},
	}, create)
	if err != nil {
		t.Fatalf("creating FencelineRemediationTemplate: %v", err)
	}
	u := readRaw(t, cs, "fencelineremediationtemplates", ns, tmpl.Name)
	// NodeHealthCheck refuses a template without spec.template, and copies
	// spec.template.spec: an empty spec must survive the round trip.
	if spec, found, err := unstructured.NestedMap(u, "spec", "template", "spec"); err != nil || !found || spec == nil {
		t.Fatalf("template's spec.template.spec: found %v, %v, err %v", found, spec, err)
	}

	rem, err := api.FencelineRemediations(ns).Create(ctx, &fencingv1alpha1.FencelineRemediation{
		ObjectMeta: metav1.ObjectMeta{
			Name: "worker-9", Namespace: ns,
			Annotations: map[string]string{"remediation.medik8s.io/node-name": "worker-9", "remediation.medik8s.io/template-name": "fenceline"},
			Labels:      map[string]string{"app.kubernetes.io/part-of": "node-healthcheck-controller"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "0b5a0a4e-0000-4000-8000-000000000001",
			}},
		},
	}, create)
	if err != nil {
		t.Fatalf("creating FencelineRemediation: %v", err)
	}
	now := metav1.Now()
	rem.Status = fencingv1alpha1.FencelineRemediationStatus{
		NodeName: "worker-9", FencingRequestName: "worker-9-abcde", Phase: fencingv1alpha1.FencingPhaseFenced, LastUpdateTime: &now,
		Conditions: []metav1.Condition{
			{Type: fencingv1alpha1.RemediationProcessing, Status: metav1.ConditionFalse, Reason: "Fenced", LastTransitionTime: now},
			{Type: fencingv1alpha1.RemediationSucceeded, Status: metav1.ConditionTrue, Reason: "Fenced", LastTransitionTime: now},
		},
	}
	if rem, err = api.FencelineRemediations(ns).UpdateStatus(ctx, rem, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating FencelineRemediation status: %v", err)
	}
	u = readRaw(t, cs, "fencelineremediations", ns, rem.Name)
	conds, found, err := unstructured.NestedSlice(u, "status", "conditions")
	if err != nil || !found {
		t.Fatalf("status.conditions: found %v, err %v", found, err)
	}
	got := map[string]string{}
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _, _ := unstructured.NestedString(m, "type")
		status, _, _ := unstructured.NestedString(m, "status")
		got[typ] = status
	}
	if got["Processing"] != "False" || got["Succeeded"] != "True" {
		t.Errorf("conditions as a checker reads them: %v, want Processing=False, Succeeded=True", got)
	}
}

// readRaw reads an object as the API server serves it, as JSON, so that
// what the typed client's structs would add is not counted.
func readRaw(t *testing.T, cs versioned.Interface, resource, ns, name string) map[string]any {
	t.Helper()
	data, err := cs.FencingV1alpha1().RESTClient().Get().Namespace(ns).Resource(resource).Name(name).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading %s %s/%s: %v", resource, ns, name, err)
	}
	var u map[string]any
	if err := json.Unmarshal(data, &u); err != nil {
		t.Fatal(err)
	}
	return u
}
