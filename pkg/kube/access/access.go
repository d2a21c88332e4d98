// Package access asks the API server which of a component's permissions its
// own identity lacks, the way `kubectl auth can-i` does, so that a component
// can say at start-up which RBAC rule is missing instead of waiting forever
// on an informer whose list is forbidden.
package access

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Rule is one permission: a verb on a resource of an API group, in a
// namespace or (Namespace empty) across the cluster.
type Rule struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Namespace   string
}

// String renders the rule as `kubectl auth can-i` takes it.
func (r Rule) String() string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Subresource != "" {
		res += " --subresource=" + r.Subresource
	}
	if r.Namespace != "" {
		return fmt.Sprintf("%s %s -n %s", r.Verb, res, r.Namespace)
	}
	return r.Verb + " " + res
}

// Missing returns, in order, the rules that the client's own identity is
// not allowed. Each is one SelfSubjectAccessReview, which every
// authenticated identity may create (system:basic-user). An error means
// the answer is unknown, not that the rules are granted.
func Missing(ctx context.Context, client authorizationclient.SelfSubjectAccessReviewsGetter, rules []Rule) ([]Rule, error) {
	var missing []Rule
	for _, r := range rules {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: r.Verb, Group: r.Group, Resource: r.Resource, Subresource: r.Subresource, Namespace: r.Namespace,
			},
		}}
		got, err := client.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("asking the API server whether this identity may %s: %w", r, err)
		}
		if !got.Status.Allowed {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

// Join renders rules for a log line or an Event: "list nodes, watch nodes".
func Join(rules []Rule) string {
	s := make([]string, len(rules))
	for i, r := range rules {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
