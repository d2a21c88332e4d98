package kubectlplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

func answer(yes bool) Confirm {
	return func(string) (bool, error) { return yes, nil }
}

func TestFence(t *testing.T) {
	kube, fenceObjs := world()
	kube = append(kube, testobj.Node("excluded", testobj.ReadySince(t0.Add(-time.Hour)), testobj.Label(detect.ExcludeLabel, "")))
	for _, tc := range []struct {
		name, node, policy string
		noPolicy           bool
		confirm            bool
		forbid             bool
		override           bool
		wantErr            string
	}{
		{name: "creates a manual, approved request", node: "live", confirm: true},
		{name: "unknown node", node: "ghost", confirm: true, wantErr: `node "ghost" not found`},
		{name: "a node with an open request", node: "dead", confirm: true, wantErr: "already has an open FencingRequest dead-abcde (phase Fenced"},
		{name: "declined", node: "live", confirm: false, wantErr: ErrAborted.Error()},
		{name: "a policy that does not exist", node: "live", policy: "nope", confirm: true, wantErr: `node live cannot be fenced: FencePolicy "nope" does not exist`},
		{name: "no policy selects the node", node: "live", noPolicy: true, confirm: true, wantErr: "no FencePolicy selects node live"},
		{name: "RBAC denies the create", node: "live", confirm: true, forbid: true, wantErr: "not allowed to create fencingrequests.fenceline.io (RBAC"},
		{name: "a node excluded from fencing", node: "excluded", confirm: true, wantErr: "node excluded is labelled fenceline.io/exclude-from-fencing: it is kept out of fencing on purpose"},
		{name: "a node excluded from fencing, exclusion overridden", node: "excluded", override: true, confirm: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := fenceObjs
			if tc.noPolicy {
				objs = []runtime.Object{fencingRequest("dead", fencingv1alpha1.FencingPhaseFenced)}
			}
			c, _, f := fakeClients(kube, objs)
			if tc.forbid {
				f.PrependReactor("create", "fencingrequests", forbidden)
			}
			r, err := Fence(context.Background(), c, FenceOptions{Node: tc.node, Policy: tc.policy, Action: fencingv1alpha1.FenceActionOff, Requester: "user:alice",
				OverrideExclusion: tc.override, Confirm: answer(tc.confirm), Now: now})
			reqs, lerr := f.FencingV1alpha1().FencingRequests().List(context.Background(), metav1.ListOptions{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Fence error = %v, want one containing %q", err, tc.wantErr)
				}
				if len(reqs.Items) != 1 {
					t.Errorf("%d FencingRequests after a refused fence, want the 1 there was", len(reqs.Items))
				}
				return
			}
			if err != nil {
				t.Fatalf("Fence: %v", err)
			}
			s := r.Spec
			if s.NodeName != tc.node || s.NodeUID != types.UID("uid-"+tc.node) || s.Reason != "Manual" || s.Requester != "user:alice" || s.Approved == nil || !*s.Approved ||
				r.Labels[names.FencingRequestNodeLabel] != tc.node || r.GenerateName != tc.node+"-" {
				t.Errorf("request = %+v %+v, want a manual approved request for node %s by user:alice, labelled with the node", r.ObjectMeta, s, tc.node)
			}
			if got, want := r.Annotations[names.OverrideExclusionAnnotation], map[bool]string{true: "user:alice"}[tc.override]; got != want {
				t.Errorf("exclusion override annotation = %q, want %q", got, want)
			}
			if len(reqs.Items) != 2 {
				t.Errorf("%d FencingRequests, want 2", len(reqs.Items))
			}
		})
	}
}
