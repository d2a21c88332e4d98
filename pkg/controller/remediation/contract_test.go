package remediation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
)

// The external-remediation contract, as the two checkers implement it and
// as mirrored here (neither NodeHealthCheck's API nor a buildable Cluster
// API test module is served by the module proxy, so their code cannot run
// in this repository's tests):
//
//   - NodeHealthCheck (medik8s/node-healthcheck-operator,
//     internal/controller/resources/manager.go generateRemediationCR):
//     copies the template's spec.template.spec into spec, names the CR
//     after the node (generateName "<node>-" when the template has the
//     multiple-templates annotation), sets the annotations
//     remediation.medik8s.io/node-name and remediation.medik8s.io/template-name,
//     puts it in the template's namespace, owned by the NodeHealthCheck
//     (and the node's Machine when that lives in the same namespace). It
//     reads, of status.conditions, only Succeeded (type, status and time;
//     True keeps its timeout from firing, False escalates to the next
//     remediator at once, but only with escalatingRemediations) and
//     PermanentNodeDeletionExpected; it sets the annotation
//     remediation.medik8s.io/nhc-timed-out when it gives up, and deletes
//     the CR as soon as the node's conditions are healthy. A run of the
//     real controller (docs/integrations.md) showed all of this.
//   - MachineHealthCheck (Cluster API, external remediation): creates the
//     CR from the template's spec.template, named after the Machine, in
//     the Machine's namespace, owned by the Machine; it reads no condition
//     and deletes the CR once the Machine is healthy.

// nhcRemediation builds the CR as NodeHealthCheck does, from the template
// as the API server serves it (unstructured), and decodes it as Fenceline
// reads it.
func nhcRemediation(t *testing.T, tmpl *fencingv1alpha1.FencelineRemediationTemplate, node string, generateName bool) *fencingv1alpha1.FencelineRemediation {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	spec, found, err := unstructured.NestedMap(u, "spec", "template", "spec")
	if err != nil || !found {
		t.Fatalf("the template has no spec.template.spec (found %v, %v): NodeHealthCheck refuses it", found, err)
	}
	cr := &unstructured.Unstructured{Object: map[string]any{}}
	cr.SetAPIVersion("fenceline.io/v1alpha1")
	cr.SetKind("FencelineRemediation")
	if err := unstructured.SetNestedField(cr.Object, spec, "spec"); err != nil {
		t.Fatal(err)
	}
	if generateName {
		cr.SetName(node + "-x7k2p") // what the API server makes of generateName
	} else {
		cr.SetName(node)
	}
	cr.SetAnnotations(map[string]string{NodeNameAnnotation: node, "remediation.medik8s.io/template-name": tmpl.Name})
	cr.SetNamespace(tmpl.Namespace)
	cr.SetLabels(map[string]string{"app.kubernetes.io/part-of": "node-healthcheck-controller"})
	cr.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "uid-nhc"}})
	cr.SetUID("uid-cr")
	out := &fencingv1alpha1.FencelineRemediation{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(cr.Object, out, true); err != nil {
		t.Fatalf("the CR NodeHealthCheck makes does not decode strictly: %v", err)
	}
	return out
}

func TestContractNodeHealthCheck(t *testing.T) {
	tmpl := &fencingv1alpha1.FencelineRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "fenceline", Namespace: "fenceline-system"},
		Spec: fencingv1alpha1.FencelineRemediationTemplateSpec{Template: fencingv1alpha1.FencelineRemediationTemplateResource{
			Spec: fencingv1alpha1.FencelineRemediationSpec{PolicyName: "workers"},
		}},
	}
	for _, generate := range []bool{false, true} {
		rem := nhcRemediation(t, tmpl, "worker-3", generate)
		if rem.Spec.PolicyName != "workers" {
			t.Errorf("spec.policyName %q, want the template's", rem.Spec.PolicyName)
		}
		if got := nhcNodeName(rem); got != "worker-3" {
			t.Errorf("generateName %v: node %q, want worker-3", generate, got)
		}
		if MachineOf(rem) != nil {
			t.Errorf("an NHC remediation taken for a Machine's")
		}
	}

	// The conditions Fenceline writes, read the way NodeHealthCheck reads
	// them (nodehealthcheck_controller.go getCondition: status.conditions
	// by type, its status).
	rem := nhcRemediation(t, tmpl, "worker-3", false)
	in := Input{Remediation: rem, NodeName: "worker-3", Node: testobj.Node("worker-3")}
	for _, tt := range []struct {
		phase     fencingv1alpha1.FencingPhase
		succeeded string // "" is absent or Unknown: NHC neither escalates nor is done
	}{
		{fencingv1alpha1.FencingPhasePending, ""},
		{fencingv1alpha1.FencingPhaseFencing, ""},
		{fencingv1alpha1.FencingPhaseRecovering, "True"},
		{fencingv1alpha1.FencingPhaseFailed, "False"},
		{fencingv1alpha1.FencingPhaseCancelled, "False"},
	} {
		req := ownRequest(tt.phase)
		req.Labels[RemediationUIDLabel] = string(rem.UID)
		req.Spec.Requester = Requester(rem)
		in.Requests = []*fencingv1alpha1.FencingRequest{req}
		rem.Status = Status(in, Decide(in))
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rem)
		if err != nil {
			t.Fatal(err)
		}
		got := nhcCondition(u, fencingv1alpha1.RemediationSucceeded)
		if got == "Unknown" {
			got = ""
		}
		if got != tt.succeeded {
			t.Errorf("%s: Succeeded as NHC reads it %q, want %q", tt.phase, got, tt.succeeded)
		}
		if c := nhcCondition(u, fencingv1alpha1.RemediationPermanentNodeDeletionExpected); c != "" {
			t.Errorf("%s: PermanentNodeDeletionExpected=%s: Fenceline never deletes a Node", tt.phase, c)
		}
		if c := nhcCondition(u, fencingv1alpha1.RemediationProcessing); c == "" {
			t.Errorf("%s: no Processing condition", tt.phase)
		}
	}
}

// nhcCondition is NodeHealthCheck's read of a condition's status.
func nhcCondition(u map[string]any, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		if ct, _, _ := unstructured.NestedString(m, "type"); ct == typ {
			s, _, _ := unstructured.NestedString(m, "status")
			return s
		}
	}
	return ""
}

// A MachineHealthCheck remediation: named after the Machine, in its
// namespace, owned by it; its node comes from the Machine. A Machine of
// another API group (OpenShift's machine.openshift.io, which NHC adds as a
// second owner) does not make it one.
func TestContractMachineHealthCheck(t *testing.T) {
	capi := &fencingv1alpha1.FencelineRemediation{ObjectMeta: metav1.ObjectMeta{
		Name: "md-0-abcde", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: "md-0-abcde", UID: "uid-m", Controller: nil}},
	}}
	if m := MachineOf(capi); m == nil || m.Name != "md-0-abcde" {
		t.Errorf("MachineOf = %v, want the Machine", m)
	}
	openshift := &fencingv1alpha1.FencelineRemediation{ObjectMeta: metav1.ObjectMeta{
		Name: "worker-3", Namespace: "openshift-machine-api",
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "remediation.medik8s.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers"},
			{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine", Name: "cluster-worker-3"},
		},
	}}
	if m := MachineOf(openshift); m != nil {
		t.Errorf("MachineOf = %v, want none: the node is the CR's name", m)
	}
	if got := nhcNodeName(openshift); got != "worker-3" {
		t.Errorf("node %q, want worker-3", got)
	}
}
