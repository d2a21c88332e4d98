package nodefencing

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/networkfence"
)

// The steps and reasons of the storage fence method NetworkFence.
const (
	// StepNetworkFence creates a NetworkFence of the Fenced request.
	StepNetworkFence Step = "NetworkFence"
	// StepNetworkUnfence unfences the recovered node's NetworkFences and
	// deletes those unfenced.
	StepNetworkUnfence Step = "NetworkUnfence"

	ReasonNetworkFenceUnavailable  = "NetworkFenceUnavailable"
	ReasonNetworkFenceClassMissing = "NetworkFenceClassMissing"
	ReasonNoNodeAddresses          = "NoNodeAddresses"
	ReasonNetworkFencePending      = "NetworkFencePending"
	ReasonNetworkFenceFailed       = "NetworkFenceFailed"
	ReasonNetworkFenceLifted       = "NetworkFenceLifted"
	ReasonNetworkUnfencePending    = "NetworkUnfencePending"
	ReasonNetworkUnfenceFailed     = "NetworkUnfenceFailed"
)

// notServedRecheck is when a node waiting for a NetworkFence API that is
// not served is looked at again (the reader asks discovery again as often).
const notServedRecheck = 30 * time.Second

// NetworkFenceInput is what Decide reads of the request's NetworkFences.
type NetworkFenceInput struct {
	// Served is false when the API server does not serve the NetworkFence
	// kinds: then no NetworkFence can exist, and none can be made.
	Served bool
	// Problem is why they could not be read, "" when they were.
	Problem string
	// Fences are the NetworkFences labelled with the request's UID.
	Fences []networkfence.Fence
	// Classes are the policy's NetworkFenceClasses that exist, by name.
	Classes map[string]networkfence.Class
}

// networkFenceMethods are the policy's NetworkFence methods.
func networkFenceMethods(p *fencingv1alpha1.FencePolicy) []fencingv1alpha1.NetworkFenceMethod {
	if p == nil {
		return nil
	}
	var out []fencingv1alpha1.NetworkFenceMethod
	for _, m := range p.Spec.StorageFenceMethods {
		if m.Method == fencingv1alpha1.StorageFenceNetworkFence && m.NetworkFence != nil {
			out = append(out, *m.NetworkFence)
		}
	}
	return out
}

// decideNetworkFences is the storage fence method NetworkFence of a Fenced
// request: the first of the policy's NetworkFences not made yet is created
// (StepNetworkFence, whatever the storageFence mode); hold says that the
// out-of-service taint must wait, because storageFence is Required and a
// NetworkFence is not confirmed by the storage (pending, failed, lifted by
// someone else, or impossible to make: no API, no class, no address).
// Waiting is always safe: the power fence is proven, and the taint only
// moves the workload sooner.
func decideNetworkFences(in Input, node *v1.Node) (d Decision, hold bool) {
	methods := networkFenceMethods(in.Policy)
	if len(methods) == 0 || in.Request == nil {
		return Decision{}, false
	}
	nf := in.NetworkFence
	if nf.Problem != "" {
		d = Decision{Reason: ReasonNetworkFenceUnavailable, Why: "NetworkFences cannot be read: " + nf.Problem}
		if !nf.Served {
			d.RecheckAfter = notServedRecheck
		}
		return holdIfRequired(in, d)
	}
	var waits []string
	wait := func(reason, why string) {
		if d.Reason == "" {
			d.Reason = reason
		}
		waits = append(waits, why)
	}
	for _, m := range methods {
		name := networkfence.Name(in.Request.Name, m.NetworkFenceClassName)
		f, found := findFence(nf.Fences, name)
		switch {
		case !found:
			class, ok := nf.Classes[m.NetworkFenceClassName]
			cidrs := networkfence.CIDRs(node, m.AddressTypes)
			switch {
			case !ok:
				wait(ReasonNetworkFenceClassMissing, fmt.Sprintf("NetworkFenceClass %s does not exist", m.NetworkFenceClassName))
			case len(cidrs) == 0:
				wait(ReasonNoNodeAddresses, fmt.Sprintf("the node has no address of types %v to fence", addressTypes(m)))
			default:
				spec := networkfence.Spec{Name: name, Class: class.Name, CIDRs: cidrs, Request: in.Request.UID, Node: in.Request.Spec.NodeName,
					NodeLabel: fencingreq.NodeLabelValue(in.Request.Spec.NodeName),
					Reason:    fmt.Sprintf("FencingRequest %s: the node is fenced (power read back Off); storage fence through driver %s", in.Request.Name, class.Provisioner)}
				return Decision{Step: StepNetworkFence, Reason: "Fenced", NetworkFence: &spec,
					Why: fmt.Sprintf("the node is fenced: create NetworkFence %s through NetworkFenceClass %s (driver %s) for %s", name, class.Name, class.Provisioner, strings.Join(cidrs, ", "))}, false
			}
		case f.Fenced():
		case f.Deleting || f.FenceState != networkfence.StateFenced:
			wait(ReasonNetworkFenceLifted, f.Describe()+": no longer fenced, and Fenceline does not make it again while it exists")
		case f.Failed():
			wait(ReasonNetworkFenceFailed, f.Describe())
		default:
			wait(ReasonNetworkFencePending, f.Describe()+": the storage has not confirmed it yet")
		}
	}
	if len(waits) == 0 {
		return Decision{}, false
	}
	d.Why = strings.Join(waits, "; ")
	return holdIfRequired(in, d)
}

// holdIfRequired is a NetworkFence's wait d, holding the out-of-service
// taint when the policy's storageFence is Required.
func holdIfRequired(in Input, d Decision) (Decision, bool) {
	if storageFence(in.Policy) != fencingv1alpha1.StorageFenceRequired {
		return d, false
	}
	d.Why += "; storageFence is Required, so the out-of-service taint waits"
	return d, true
}

// decideNetworkUnfence is the last step of a recovery before the unfence
// (StepRecover), taken once every other condition of the unfence holds:
// every NetworkFence of the request is set Unfenced, and deleted once the
// storage confirmed it (StepNetworkUnfence); wait says that one is not
// confirmed yet, or cannot be read, and the node stays fenced meanwhile.
// A NetworkFence is unfenced before any taint goes, so that the node's new
// pods find their storage reachable.
func decideNetworkUnfence(in Input) (d Decision, wait bool) {
	nf := in.NetworkFence
	if !nf.Served {
		return Decision{}, false
	}
	if nf.Problem != "" {
		return Decision{Reason: ReasonNetworkFenceUnavailable, Why: "the node's NetworkFences cannot be read: " + nf.Problem}, true
	}
	var waits []string
	for _, f := range nf.Fences {
		switch {
		case f.Deleting:
			waits = append(waits, f.Describe())
		case f.FenceState == networkfence.StateFenced, f.Unfenced():
			return Decision{Step: StepNetworkUnfence, Reason: "Unfenced", Why: "the node rebooted and nothing of its old boot is left: unfence and delete its NetworkFences"}, true
		case f.Failed():
			if d.Reason == "" {
				d.Reason = ReasonNetworkUnfenceFailed
			}
			waits = append(waits, f.Describe())
		default:
			waits = append(waits, f.Describe()+": the storage has not confirmed the unfence yet")
		}
	}
	if len(waits) == 0 {
		return Decision{}, false
	}
	if d.Reason == "" {
		d.Reason = ReasonNetworkUnfencePending
	}
	d.Why = strings.Join(waits, "; ") + "; the node stays fenced until its NetworkFences are lifted"
	return d, true
}

func findFence(fences []networkfence.Fence, name string) (networkfence.Fence, bool) {
	for _, f := range fences {
		if f.Name == name {
			return f, true
		}
	}
	return networkfence.Fence{}, false
}

func addressTypes(m fencingv1alpha1.NetworkFenceMethod) []v1.NodeAddressType {
	if len(m.AddressTypes) == 0 {
		return []v1.NodeAddressType{v1.NodeInternalIP}
	}
	return m.AddressTypes
}
