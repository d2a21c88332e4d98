package kubectlplugin

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/kube/networkfence"
)

// TestExplainReadsNetworkFences: explain decides as node-fencing on the
// NetworkFences it reads, and says why it waits where it cannot read them.
func TestExplainReadsNetworkFences(t *testing.T) {
	now := testobj.Epoch
	node := testobj.Node("n1", testobj.UnknownSince(now.Add(-time.Minute)), testobj.Address(v1.NodeInternalIP, "10.0.0.7"))
	req := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced), testobj.BootIDAtFence("boot-1"),
		testobj.Attempts(testobj.FenceAttempt(1, "bmc", fencingv1alpha1.FenceAttemptSucceeded, fencingv1alpha1.PowerStateOff)))
	spec := networkfence.Spec{Name: networkfence.Name(req.Name, "nf"), Class: "nf", CIDRs: []string{"10.0.0.7/32"}, Request: req.UID, Node: "n1", NodeLabel: "n1"}
	confirmed := spec.Object()
	_ = unstructured.SetNestedField(confirmed.Object, networkfence.ResultSucceeded, "status", "result")
	_ = unstructured.SetNestedField(confirmed.Object, networkfence.FencedMessage, "status", "message")
	class := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "NetworkFenceClass",
		"metadata": map[string]any{"name": "nf"}, "spec": map[string]any{"provisioner": "disk.example.com"}}}
	kinds := map[schema.GroupVersionResource]string{networkfence.Resource: "NetworkFenceList", networkfence.ClassResource: "NetworkFenceClassList"}

	tests := []struct {
		name       string
		objs       []runtime.Object
		err        error
		wantStep   nodefencing.Step
		wantReason string
	}{
		{"none made yet: make it", []runtime.Object{class}, nil, nodefencing.StepNetworkFence, "Fenced"},
		{"confirmed: the out-of-service taint", []runtime.Object{class, confirmed}, nil, nodefencing.StepOutOfService, "Fenced"},
		{"not installed: none made, waits for the API", nil, networkfence.ErrNotServed, nodefencing.StepNone, nodefencing.ReasonNetworkFenceUnavailable},
		{"not allowed to read them: waits, says why", nil, errors.New("not allowed to list networkfences.csiaddons.openshift.io"), nodefencing.StepNone, nodefencing.ReasonNetworkFenceUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Now: now, Nodes: []*v1.Node{node}, FencingAPI: true, Requests: []*fencingv1alpha1.FencingRequest{req},
				Policies: []*fencingv1alpha1.FencePolicy{testobj.FencePolicy("p", testobj.NetworkFences("nf"))},
				Classes:  []*fencingv1alpha1.FenceClass{testobj.FenceClass("bmc")}}
			disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{{GroupVersion: "csiaddons.openshift.io/v1alpha1",
				APIResources: []metav1.APIResource{{Name: "networkfences"}, {Name: "networkfenceclasses"}}}}}}
			s.readNetworkFences(context.Background(), disc, dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, tc.objs...))
			if tc.err != nil {
				s.NetworkFencesErr = tc.err
			}
			d := nodefencing.Decide(FencingInput(s, testobj.Lease("n1", now.Add(-time.Minute)), node))
			if d.Step != tc.wantStep || d.Reason != tc.wantReason {
				t.Fatalf("Decide = %q %q (%s), want %q %q", d.Step, d.Reason, d.Why, tc.wantStep, tc.wantReason)
			}
		})
	}
}
