// Package fencingreq reads FencingRequests the same way in every component:
// which phases are terminal, and when the attempts prove a node fenced. It
// is a leaf (API types only) so that fenceline-controller, which marks a
// request Fenced and then lets the node's volumes go, and
// fenceline-fence-agent, which stops fencing once a level is proven, can
// never disagree on what "proven" means.
package fencingreq

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// Terminal reports whether a request in phase p is over: Recovered, Failed
// or Cancelled. Fenced and Recovering are not: the node is still out of
// service and the request still owns its taints.
func Terminal(p fencingv1alpha1.FencingPhase) bool {
	switch p {
	case fencingv1alpha1.FencingPhaseRecovered, fencingv1alpha1.FencingPhaseFailed, fencingv1alpha1.FencingPhaseCancelled:
		return true
	}
	return false
}

// ProvenLevel returns the first level of levels (in the order given, which
// the API keeps ascending) for which every FenceClass has an attempt of that
// level with result Succeeded and a read-back power state of Off. That is
// the only proof that a node is fenced: an accepted request or an exit code
// is not. A level with no class proves nothing.
func ProvenLevel(attempts []fencingv1alpha1.FenceAttempt, levels []fencingv1alpha1.FenceLevel) (int32, bool) {
	for _, l := range levels {
		if len(l.FenceClassNames) == 0 {
			continue
		}
		all := true
		for _, class := range l.FenceClassNames {
			if !verifiedOff(attempts, l.Index, class) {
				all = false
				break
			}
		}
		if all {
			return l.Index, true
		}
	}
	return 0, false
}

// verifiedOff reports whether some attempt of the class at the level
// succeeded with the power read back Off.
func verifiedOff(attempts []fencingv1alpha1.FenceAttempt, level int32, class string) bool {
	for _, a := range attempts {
		if a.Level == level && a.FenceClass == class && a.Result == fencingv1alpha1.FenceAttemptSucceeded &&
			a.VerifiedPowerState == string(fencingv1alpha1.PowerStateOff) {
			return true
		}
	}
	return false
}

// DefaultMaxAttempts is stormGuard.maxAttempts when the policy leaves it
// unset (the API's default).
const DefaultMaxAttempts = 5

// MaxAttempts is the number of failed rounds after which a request of the
// policy is Failed: the agent stops there and the controller fails it.
// A nil policy gets the default.
func MaxAttempts(p *fencingv1alpha1.FencePolicy) int {
	if p == nil || p.Spec.StormGuard.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return int(p.Spec.StormGuard.MaxAttempts)
}

// Selector is the policy's node selector. An unset nodeSelector selects
// every node, as the API documents; a selector that does not parse
// selects nothing.
func Selector(p *fencingv1alpha1.FencePolicy) labels.Selector {
	if p.Spec.NodeSelector == nil {
		return labels.Everything()
	}
	s, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector)
	if err != nil {
		return labels.Nothing()
	}
	return s
}

// ResolvePolicy returns the policy of a node: the named one, or else the
// only policy whose selector matches the node. Several matching policies
// is a conflict that fences nothing (problem says so): which one would
// apply is not the user's decision any more. Both the controller and the
// fence agent resolve a request's policy here, so they never follow two
// different policies.
func ResolvePolicy(node *v1.Node, name string, policies []*fencingv1alpha1.FencePolicy) (policy *fencingv1alpha1.FencePolicy, problem string) {
	if name != "" {
		for _, p := range policies {
			if p.Name == name {
				return p, ""
			}
		}
		return nil, fmt.Sprintf("FencePolicy %q does not exist", name)
	}
	if node == nil {
		return nil, "the node does not exist and the request names no policy"
	}
	var matched []string
	for _, p := range policies {
		if Selector(p).Matches(labels.Set(node.Labels)) {
			matched = append(matched, p.Name)
			policy = p
		}
	}
	switch len(matched) {
	case 0:
		return nil, ""
	case 1:
		return policy, ""
	}
	slices.Sort(matched)
	return nil, fmt.Sprintf("node %s is selected by several FencePolicies (%s); fencing it needs exactly one", node.Name, strings.Join(matched, ", "))
}

// GenerateName is the name prefix of a node's FencingRequest: the node's
// name, cut so that the generated suffix still fits.
func GenerateName(node string) string {
	if len(node) > 200 {
		node = node[:200]
	}
	return node + "-"
}

// NodeLabelValue is the value of names.FencingRequestNodeLabel on a node's
// FencingRequests: the node's name when it is a valid label value, else a
// hash of it.
func NodeLabelValue(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	sum := sha256.Sum256([]byte(node))
	return "sha256-" + hex.EncodeToString(sum[:])[:40]
}
