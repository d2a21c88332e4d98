package networkfence

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestCIDRs(t *testing.T) {
	node := func(addrs ...v1.NodeAddress) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Addresses: addrs}}
	}
	in := func(a string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeInternalIP, Address: a} }
	ex := func(a string) v1.NodeAddress { return v1.NodeAddress{Type: v1.NodeExternalIP, Address: a} }
	tests := []struct {
		name  string
		node  *v1.Node
		types []v1.NodeAddressType
		want  []string
	}{
		{"no node", nil, nil, nil},
		{"InternalIP by default", node(in("10.0.0.7"), ex("1.2.3.4"), v1.NodeAddress{Type: v1.NodeHostName, Address: "n1"}), nil, []string{"10.0.0.7/32"}},
		{"IPv6 is /128, sorted", node(in("fd00::7"), in("10.0.0.7")), nil, []string{"10.0.0.7/32", "fd00::7/128"}},
		{"IPv4-mapped IPv6 is IPv4", node(in("::ffff:10.0.0.7")), nil, []string{"10.0.0.7/32"}},
		{"duplicates once", node(in("10.0.0.7"), in("10.0.0.7")), nil, []string{"10.0.0.7/32"}},
		{"unparsable skipped", node(in("not-an-ip"), in("10.0.0.8")), nil, []string{"10.0.0.8/32"}},
		{"both types asked", node(in("10.0.0.7"), ex("1.2.3.4")), []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP}, []string{"1.2.3.4/32", "10.0.0.7/32"}},
		{"none of the type", node(ex("1.2.3.4")), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CIDRs(tc.node, tc.types); !slices.Equal(got, tc.want) {
				t.Fatalf("CIDRs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNameIsStableAndBounded(t *testing.T) {
	a, b := Name("n1-abcde", "ceph"), Name("n1-abcde", "other")
	if a != Name("n1-abcde", "ceph") || a == b || !strings.HasPrefix(a, "n1-abcde-nf-") {
		t.Fatalf("names %q %q", a, b)
	}
	if long := Name(strings.Repeat("x", 253), "ceph"); len(long) != 253 {
		t.Fatalf("len = %d", len(long))
	}
}

func TestFenceStates(t *testing.T) {
	spec := Spec{Name: "nf", Class: "ceph", CIDRs: []string{"10.0.0.7/32"}, Request: "uid-1", Node: "n1", NodeLabel: "n1", Reason: "why"}
	u := spec.Object()
	f := FromUnstructured(u)
	if f.Name != "nf" || f.Class != "ceph" || f.FenceState != StateFenced || !slices.Equal(f.CIDRs, spec.CIDRs) || f.Fenced() || f.Failed() {
		t.Fatalf("fresh fence read as %+v", f)
	}
	if u.GetLabels()[RequestLabel] != "uid-1" || u.GetAnnotations()[NodeAnnotation] != "n1" {
		t.Fatalf("labels %v annotations %v", u.GetLabels(), u.GetAnnotations())
	}
	set := func(result, msg string) Fence {
		c := u.DeepCopy()
		_ = unstructured.SetNestedField(c.Object, result, "status", "result")
		_ = unstructured.SetNestedField(c.Object, msg, "status", "message")
		return FromUnstructured(c)
	}
	if !set(ResultSucceeded, FencedMessage).Fenced() {
		t.Fatal("a Succeeded fence is not Fenced")
	}
	unf := set(ResultSucceeded, FencedMessage)
	unf.FenceState = StateUnfenced
	if unf.Fenced() || unf.Unfenced() {
		t.Fatal("an unfence whose result is the fence's counts as done")
	}
	unf.Message = UnfencedMessage
	if !unf.Unfenced() {
		t.Fatal("a confirmed unfence is not Unfenced")
	}
	if !set(ResultFailed, "boom").Failed() {
		t.Fatal("Failed not read")
	}
}
