package access

import (
	"context"
	"errors"
	"slices"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	listNodes   = Rule{Verb: "list", Resource: "nodes"}
	watchDrv    = Rule{Verb: "watch", Group: "storage.k8s.io", Resource: "csidrivers"}
	createEvent = Rule{Verb: "create", Resource: "events", Namespace: "default"}
)

// reviewer answers SelfSubjectAccessReviews from a set of allowed rules.
func reviewer(allowed ...Rule) *fake.Clientset {
	client := fake.NewClientset()
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := review.Spec.ResourceAttributes
		asked := Rule{Verb: attr.Verb, Group: attr.Group, Resource: attr.Resource, Namespace: attr.Namespace}
		review.Status.Allowed = slices.Contains(allowed, asked)
		return true, review, nil
	})
	return client
}

func TestMissing(t *testing.T) {
	all := []Rule{listNodes, watchDrv, createEvent}
	for _, tc := range []struct {
		name    string
		allowed []Rule
		want    []Rule
	}{
		{"everything granted", all, nil},
		{"nothing granted", nil, all},
		{"events only missing", []Rule{listNodes, watchDrv}, []Rule{createEvent}},
		{"a namespaced grant is not a cluster grant", []Rule{{Verb: "list", Resource: "nodes", Namespace: "x"}, watchDrv, createEvent}, []Rule{listNodes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Missing(context.Background(), reviewer(tc.allowed...).AuthorizationV1(), all)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Missing = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMissingErrorIsNotAGrant(t *testing.T) {
	client := fake.NewClientset()
	boom := errors.New("connection refused")
	client.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, boom
	})
	got, err := Missing(context.Background(), client.AuthorizationV1(), []Rule{listNodes})
	if !errors.Is(err, boom) || got != nil {
		t.Fatalf("Missing = %v, %v; want nil and an error wrapping %v", got, err, boom)
	}
}

func TestRuleString(t *testing.T) {
	for r, want := range map[Rule]string{
		listNodes:   "list nodes",
		watchDrv:    "watch csidrivers.storage.k8s.io",
		createEvent: "create events -n default",
	} {
		if got := r.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", r, got, want)
		}
	}
	if got := Join([]Rule{listNodes, watchDrv}); got != "list nodes, watch csidrivers.storage.k8s.io" {
		t.Errorf("Join = %q", got)
	}
}
