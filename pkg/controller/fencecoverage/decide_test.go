package fencecoverage

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
)

var probedAt = testobj.Epoch

func reachable(node string, opts ...testobj.TargetOption) *fencingv1alpha1.FenceTarget {
	return testobj.FenceTarget(node, append([]testobj.TargetOption{testobj.Probed(fencingv1alpha1.PowerStateOn, true, probedAt)}, opts...)...)
}

func TestNodeCoverage(t *testing.T) {
	workers := testobj.FencePolicy("workers", testobj.Selecting("role", "worker"))
	everyNode := testobj.FencePolicy("all")
	node := testobj.Node("n1", testobj.Label("role", "worker"))
	tests := []struct {
		name       string
		problem    string
		policies   []*fencingv1alpha1.FencePolicy
		target     *fencingv1alpha1.FenceTarget
		wantReason string
		wantIn     string // a word the message must hold
	}{
		{name: "reachable target of the policy's class", target: reachable("n1")},
		{name: "policy not usable", problem: "FencePolicy workers names FenceClasses that do not exist: bmc", target: reachable("n1"), wantReason: ReasonPolicyNotUsable, wantIn: "do not exist"},
		{name: "two policies select the node", policies: []*fencingv1alpha1.FencePolicy{workers, everyNode}, target: reachable("n1"), wantReason: ReasonSeveralPolicies, wantIn: "all, workers"},
		{name: "no FenceTarget", wantReason: ReasonNoFenceTarget, wantIn: "create one"},
		{
			name:   "no endpoint of the policy's classes",
			target: reachable("n1", testobj.Endpoints(fencingv1alpha1.FenceEndpoint{FenceClassName: "ipmi", Address: "10.0.0.1"})), wantReason: ReasonNoEndpointForPolicy, wantIn: "(bmc)",
		},
		{name: "never probed", target: testobj.FenceTarget("n1"), wantReason: ReasonNotProbed, wantIn: "fence agent"},
		{name: "spec changed since the probe", target: reachable("n1", testobj.TargetGeneration(2)), wantReason: ReasonNotProbed},
		{name: "credentials rejected", target: testobj.FenceTarget("n1", testobj.ProbeFailed("CredentialsRejected", "endpoint bmc: 401", probedAt)), wantReason: "CredentialsRejected", wantIn: "401"},
		{name: "unreachable", target: testobj.FenceTarget("n1", testobj.ProbeFailed("Unreachable", "endpoint bmc: timeout", probedAt)), wantReason: "Unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policies := tt.policies
			if policies == nil {
				policies = []*fencingv1alpha1.FencePolicy{workers}
			}
			reason, message := NodeCoverage(node, workers, tt.problem, policies, tt.target)
			if reason != tt.wantReason {
				t.Errorf("reason %q (%s), want %q", reason, message, tt.wantReason)
			}
			if (reason == "") != (message == "") {
				t.Errorf("reason %q with message %q: both or neither", reason, message)
			}
			if !strings.Contains(message, tt.wantIn) {
				t.Errorf("message %q lacks %q", message, tt.wantIn)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	policy := testobj.FencePolicy("workers", testobj.Selecting("role", "worker"))
	policy.Generation = 3
	worker := func(name string, opts ...testobj.NodeOption) *v1.Node {
		return testobj.Node(name, append([]testobj.NodeOption{testobj.Label("role", "worker")}, opts...)...)
	}
	nodes := []*v1.Node{
		worker("w3"), worker("w1"), worker("w2"),
		worker("excluded", testobj.Label(detect.ExcludeLabel, "maintenance")),
		testobj.Node("control-plane"),
	}
	targets := map[string]*fencingv1alpha1.FenceTarget{"w1": reachable("w1"), "w3": testobj.FenceTarget("w3", testobj.ProbeFailed("Unreachable", "timeout", probedAt))}
	got := Decide(Input{Policy: policy, Policies: []*fencingv1alpha1.FencePolicy{policy}, Nodes: nodes, Targets: targets})
	if got.SelectedNodes != 3 || got.UncoveredNodes != 2 || got.ObservedGeneration != 3 {
		t.Errorf("selected %d, uncovered %d, generation %d; want 3 (neither the excluded node nor the control plane), 2, 3", got.SelectedNodes, got.UncoveredNodes, got.ObservedGeneration)
	}
	want := []string{"w2 " + ReasonNoFenceTarget, "w3 Unreachable"}
	if len(got.Uncovered) != len(want) {
		t.Fatalf("uncovered %+v, want %v", got.Uncovered, want)
	}
	for i, u := range got.Uncovered {
		if u.Node+" "+u.Reason != want[i] {
			t.Errorf("uncovered[%d] = %s %s, want %s", i, u.Node, u.Reason, want[i])
		}
	}
}

// The list is cut at the API's limit; the count is not.
func TestDecideListsAtMostTheLimit(t *testing.T) {
	policy := testobj.FencePolicy("all")
	var nodes []*v1.Node
	for i := range fencingv1alpha1.MaxUncoveredListed + 10 {
		nodes = append(nodes, testobj.Node(fmt.Sprintf("n%03d", i)))
	}
	got := Decide(Input{Policy: policy, Policies: []*fencingv1alpha1.FencePolicy{policy}, Nodes: nodes})
	if got.UncoveredNodes != int32(len(nodes)) || len(got.Uncovered) != fencingv1alpha1.MaxUncoveredListed {
		t.Errorf("uncovered %d listed %d, want %d listed %d", got.UncoveredNodes, len(got.Uncovered), len(nodes), fencingv1alpha1.MaxUncoveredListed)
	}
	if got.Uncovered[0].Node != "n000" {
		t.Errorf("first listed %s, want n000 (by name)", got.Uncovered[0].Node)
	}
}
