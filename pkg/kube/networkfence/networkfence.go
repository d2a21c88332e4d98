// Package networkfence reads and writes csi-addons NetworkFence objects
// (csiaddons.openshift.io/v1alpha1) for Fenceline's storage fence method
// NetworkFence. Fenceline has no Go module of csi-addons, so the objects
// go through the dynamic client, and this package holds what Fenceline
// reads of them: the fields of the published NetworkFence and
// NetworkFenceClass kinds it needs, nothing more.
//
// The csi-addons controller fences or unfences the CIDRs of a NetworkFence
// whenever its generation changes, and reports only status.result and
// status.message (no observedGeneration). A result is therefore read
// together with its message: after spec.fenceState turns Unfenced, the
// Succeeded of the fence stays until the unfence is done, and only the
// unfence's own message says that it is.
package networkfence

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/pkg/names"
)

// The csi-addons kinds.
var (
	// Resource is the NetworkFence resource (cluster-scoped).
	Resource = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "networkfences"}
	// ClassResource is the NetworkFenceClass resource (cluster-scoped).
	ClassResource = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "networkfenceclasses"}
)

// Values of spec.fenceState and status.result, and the messages the
// csi-addons controller writes with a Succeeded result.
const (
	StateFenced     = "Fenced"
	StateUnfenced   = "Unfenced"
	ResultSucceeded = "Succeeded"
	ResultFailed    = "Failed"
	FencedMessage   = "fencing operation successful"
	UnfencedMessage = "unfencing operation successful"
)

// Labels and annotations Fenceline puts on the NetworkFences it creates.
const (
	// RequestLabel holds the UID of the FencingRequest a NetworkFence was
	// made for: the one key every read selects by.
	RequestLabel = names.Domain + "/fencing-request-uid"
	// NodeLabel holds the node's label value (names.FencingRequestNodeLabel).
	NodeLabel = names.FencingRequestNodeLabel
	// NodeAnnotation holds the node's name.
	NodeAnnotation = names.Domain + "/node-name"
	// ReasonAnnotation says why Fenceline made it, written with it.
	ReasonAnnotation = names.Domain + "/reason"
)

// Fence is what Fenceline reads of a NetworkFence.
type Fence struct {
	Name       string
	Class      string
	FenceState string
	CIDRs      []string
	Result     string
	Message    string
	// Deleting: its deletionTimestamp is set (the csi-addons controller
	// removes its finalizer without unfencing).
	Deleting bool
}

// Fenced reports whether the storage confirmed the fence: the fence is
// wanted, and the last operation the controller reported was it.
func (f Fence) Fenced() bool {
	return f.FenceState == StateFenced && !f.Deleting && f.Result == ResultSucceeded && f.Message == FencedMessage
}

// Unfenced reports whether the storage confirmed the unfence.
func (f Fence) Unfenced() bool {
	return f.FenceState == StateUnfenced && f.Result == ResultSucceeded && f.Message == UnfencedMessage
}

// Failed reports whether the last operation for the wanted state failed.
func (f Fence) Failed() bool { return f.Result == ResultFailed }

// Class is what Fenceline reads of a NetworkFenceClass.
type Class struct {
	Name string
	// Provisioner is the CSI driver that fences.
	Provisioner string
}

// FromUnstructured reads a NetworkFence.
func FromUnstructured(u *unstructured.Unstructured) Fence {
	f := Fence{Name: u.GetName(), Deleting: u.GetDeletionTimestamp() != nil}
	f.Class, _, _ = unstructured.NestedString(u.Object, "spec", "networkFenceClassName")
	f.FenceState, _, _ = unstructured.NestedString(u.Object, "spec", "fenceState")
	f.CIDRs, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "cidrs")
	f.Result, _, _ = unstructured.NestedString(u.Object, "status", "result")
	f.Message, _, _ = unstructured.NestedString(u.Object, "status", "message")
	return f
}

// ClassFromUnstructured reads a NetworkFenceClass.
func ClassFromUnstructured(u *unstructured.Unstructured) Class {
	c := Class{Name: u.GetName()}
	c.Provisioner, _, _ = unstructured.NestedString(u.Object, "spec", "provisioner")
	return c
}

// Spec is a NetworkFence Fenceline creates.
type Spec struct {
	Name, Class string
	CIDRs       []string
	Request     types.UID
	Node        string
	NodeLabel   string
	Reason      string
}

// Object is the NetworkFence of s, fenced.
func (s Spec) Object() *unstructured.Unstructured {
	cidrs := make([]any, len(s.CIDRs))
	for i, c := range s.CIDRs {
		cidrs[i] = c
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Resource.GroupVersion().String(),
		"kind":       "NetworkFence",
		"metadata": map[string]any{
			"name":        s.Name,
			"labels":      map[string]any{RequestLabel: string(s.Request), NodeLabel: s.NodeLabel},
			"annotations": map[string]any{ReasonAnnotation: s.Reason, NodeAnnotation: s.Node},
		},
		"spec": map[string]any{
			"networkFenceClassName": s.Class,
			"fenceState":            StateFenced,
			"cidrs":                 cidrs,
		},
	}}
	return u
}

// Name is the NetworkFence of request for class: the request's name and a
// hash of the class, so that a create is idempotent and a name never
// exceeds 253 characters.
func Name(request, class string) string {
	sum := sha256.Sum256([]byte(class))
	suffix := "-nf-" + hex.EncodeToString(sum[:])[:10]
	if max := 253 - len(suffix); len(request) > max {
		request = request[:max]
	}
	return request + suffix
}

// CIDRs are the node's addresses of the given types (InternalIP when
// none), each as a single-address prefix (/32 or /128), sorted, without
// duplicates. An address that does not parse is skipped.
func CIDRs(node *v1.Node, addressTypes []v1.NodeAddressType) []string {
	if node == nil {
		return nil
	}
	if len(addressTypes) == 0 {
		addressTypes = []v1.NodeAddressType{v1.NodeInternalIP}
	}
	var out []string
	for _, a := range node.Status.Addresses {
		if !slices.Contains(addressTypes, a.Type) {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		p := netip.PrefixFrom(ip, ip.BitLen()).String()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Describe is a NetworkFence in words, for Events and conditions.
func (f Fence) Describe() string {
	state := "pending"
	switch {
	case f.Deleting:
		state = "being deleted"
	case f.Fenced():
		state = "fenced"
	case f.Unfenced():
		state = "unfenced"
	case f.Failed():
		state = fmt.Sprintf("failed: %s", f.Message)
	}
	return fmt.Sprintf("NetworkFence %s (%s, %s) %s", f.Name, f.FenceState, f.Class, state)
}
