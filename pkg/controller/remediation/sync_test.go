package remediation

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

type syncEnv struct {
	*ctrltest.Fixture
	c *Controller
}

func newSyncEnv(t *testing.T, machines MachineNodes, objs ...runtime.Object) *syncEnv {
	t.Helper()
	f := ctrltest.New(t, testobj.Epoch, objs...)
	c, err := New(Config{Informers: f.Informers, Fencing: f.FencingInformers, Client: f.Fencing, Kube: f.Kube,
		Machines: machines, Recorder: f.Recorder, Now: f.Clock.Now, Namespaces: []string{"fenceline", "capi"}})
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	return &syncEnv{Fixture: f, c: c}
}

func (e *syncEnv) sync(key string) ctrltest.Result {
	e.T.Helper()
	r := e.Sync(e.c.sync, key)
	if r.Err != nil {
		e.T.Fatalf("sync %s: %v", key, r.Err)
	}
	return r
}

func (e *syncEnv) remediation(ns, name string) *fencingv1alpha1.FencelineRemediation {
	e.T.Helper()
	r, err := e.Fencing.FencingV1alpha1().FencelineRemediations(ns).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

func (e *syncEnv) request(name string) *fencingv1alpha1.FencingRequest {
	e.T.Helper()
	r, err := e.Fencing.FencingV1alpha1().FencingRequests().Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return r
}

// setPhase plays node-fencing: the request moves to phase p.
func (e *syncEnv) setPhase(name string, p fencingv1alpha1.FencingPhase, conds ...metav1.Condition) {
	e.T.Helper()
	r := e.request(name)
	r.Status.Phase = p
	r.Status.Conditions = append(r.Status.Conditions, conds...)
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().UpdateStatus(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

func conditionStatus(r *fencingv1alpha1.FencelineRemediation, typ string) metav1.ConditionStatus {
	for _, c := range r.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// The NodeHealthCheck story: a remediation named after the node gets its
// finalizer, then one approved FencingRequest; its conditions follow the
// request until Succeeded; deleted after the node recovered, it lets go
// without touching the request.
func TestSyncNodeHealthCheck(t *testing.T) {
	rem := remediation(noFinalizer)
	e := newSyncEnv(t, nil, testobj.Node("w1"), testobj.FencePolicy("p"), rem)
	key := "fenceline/w1"

	e.sync(key).Check(t, ctrltest.Want{Writes: [][]string{{"update fencelineremediations fenceline/w1"}}})
	e.sync(key).Check(t, ctrltest.Want{
		Writes: [][]string{{"create fencingrequests w1-00001"}},
		Events: []string{"Normal " + EventRequestCreated + " FencingRequest w1-00001 for node w1"},
	})
	req := e.request("w1-00001")
	if req.Spec.Requester != "remediation:fenceline/w1" || req.Spec.Reason != ReasonExternalRemediation ||
		req.Spec.Approved == nil || !*req.Spec.Approved || req.Spec.NodeUID != "uid-w1" ||
		req.Labels[names.FencingRequestNodeLabel] != "w1" || req.Labels[RemediationUIDLabel] != string(rem.UID) {
		t.Fatalf("request %+v %+v", req.ObjectMeta, req.Spec)
	}
	// Pending: Processing.
	e.sync(key).Check(t, ctrltest.Want{Writes: [][]string{{"update fencelineremediations/status fenceline/w1"}}})
	got := e.remediation("fenceline", "w1")
	if conditionStatus(got, "Processing") != "True" || conditionStatus(got, "Succeeded") != "Unknown" ||
		got.Status.FencingRequestName != "w1-00001" || got.Status.NodeName != "w1" || got.Status.LastUpdateTime == nil {
		t.Fatalf("status %+v", got.Status)
	}
	// Nothing changed: no write.
	e.sync(key).Check(t, ctrltest.Want{})

	e.setPhase("w1-00001", fencingv1alpha1.FencingPhaseFenced, metav1.Condition{Type: fencingv1alpha1.FencingRequestOutOfServiceApplied, Status: metav1.ConditionTrue, Reason: "TaintAdded", LastTransitionTime: metav1.NewTime(testobj.Epoch)})
	e.sync(key).Check(t, ctrltest.Want{
		Writes: [][]string{{"update fencelineremediations/status fenceline/w1"}},
		Events: []string{"Normal " + EventSucceeded},
	})
	got = e.remediation("fenceline", "w1")
	if conditionStatus(got, "Processing") != "False" || conditionStatus(got, "Succeeded") != "True" || got.Status.Phase != fencingv1alpha1.FencingPhaseFenced {
		t.Fatalf("status %+v", got.Status)
	}

	// The node recovered; NodeHealthCheck deletes the remediation.
	e.setPhase("w1-00001", fencingv1alpha1.FencingPhaseRecovered)
	e.sync(key) // mirrors Recovered
	markDeleted(t, e, "fenceline", "w1")
	e.sync(key).Check(t, ctrltest.Want{
		Writes: [][]string{{"update fencelineremediations fenceline/w1"}},
		Events: []string{"Normal " + EventReleased + " the remediation is being deleted; FencingRequest w1-00001 is Recovered and is left to finish"},
	})
	if req := e.request("w1-00001"); req.Annotations[names.UnfenceAnnotation] != "" {
		t.Errorf("the request was asked to cancel: %v", req.Annotations)
	}
}

// markDeleted sets the deletion timestamp, as the API server does for an
// object with finalizers (the fake deletes at once).
func markDeleted(t *testing.T, e *syncEnv, ns, name string) {
	t.Helper()
	r := e.remediation(ns, name)
	now := metav1.NewTime(testobj.Epoch)
	r.DeletionTimestamp = &now
	if _, err := e.Fencing.FencingV1alpha1().FencelineRemediations(ns).Update(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A remediation deleted before node-fencing admitted its request asks for
// the request to be cancelled, then lets go; a request in progress is
// never touched.
func TestSyncDeletedBeforeAdmission(t *testing.T) {
	for _, tt := range []struct {
		name       string
		phase      fencingv1alpha1.FencingPhase
		wantCancel bool
	}{
		{"pending", fencingv1alpha1.FencingPhasePending, true},
		{"triaged", fencingv1alpha1.FencingPhaseTriaged, true},
		{"fencing", fencingv1alpha1.FencingPhaseFencing, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newSyncEnv(t, nil, testobj.Node("w1"), remediation(deleting), ownRequest(tt.phase))
			key := "fenceline/w1"
			if tt.wantCancel {
				e.sync(key).Check(t, ctrltest.Want{
					Writes: [][]string{{"update fencingrequests w1-req"}},
					Events: []string{"Normal " + EventCancelAsked},
				})
				if got := e.request("w1-req").Annotations[names.UnfenceAnnotation]; got != "remediation:fenceline/w1" {
					t.Errorf("unfence ask %q", got)
				}
			}
			e.sync(key).Check(t, ctrltest.Want{
				Writes: [][]string{{"update fencelineremediations fenceline/w1"}},
				Events: []string{"Normal " + EventReleased},
			})
			if !tt.wantCancel {
				if got := e.request("w1-req").Annotations[names.UnfenceAnnotation]; got != "" {
					t.Errorf("a request in progress was asked to cancel: %q", got)
				}
			}
		})
	}
}

// A failed request makes Succeeded False (NodeHealthCheck escalates) and
// is never replaced.
func TestSyncFailed(t *testing.T) {
	e := newSyncEnv(t, nil, testobj.Node("w1"), remediation(), ownRequest(fencingv1alpha1.FencingPhaseFailed))
	e.sync("fenceline/w1").Check(t, ctrltest.Want{
		Writes: [][]string{{"update fencelineremediations/status fenceline/w1"}},
		Events: []string{"Warning " + EventFailed},
	})
	if got := e.remediation("fenceline", "w1"); conditionStatus(got, "Succeeded") != "False" || conditionStatus(got, "Processing") != "False" {
		t.Errorf("status %+v", got.Status)
	}
	e.sync("fenceline/w1").Check(t, ctrltest.Want{})
}

// The decision is made again on fresh reads: a request the cache does not
// show yet is found, and none is created.
func TestSyncFreshReadFindsARequest(t *testing.T) {
	e := newSyncEnv(t, nil, testobj.Node("w1"), remediation())
	// The API server's lists hold a request the cache never sees.
	hidden := ownRequest(fencingv1alpha1.FencingPhasePending)
	e.Fencing.PrependReactor("list", "fencingrequests", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, &fencingv1alpha1.FencingRequestList{Items: []fencingv1alpha1.FencingRequest{*hidden}}, nil
	})
	r := e.Sync(e.c.sync, "fenceline/w1")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.After != changedDecisionRecheck {
		t.Errorf("looked at again after %s, want %s", r.After, changedDecisionRecheck)
	}
	for _, w := range r.Writes {
		if w.Verb == "create" {
			t.Fatalf("created %s although the API server holds the remediation's request", w)
		}
	}
}

// A remediation outside the configured namespaces is ignored.
func TestSyncOtherNamespace(t *testing.T) {
	e := newSyncEnv(t, nil, testobj.Node("w1"), remediation(noFinalizer, func(r *fencingv1alpha1.FencelineRemediation) { r.Namespace = "tenant" }))
	e.sync("tenant/w1").Check(t, ctrltest.Want{})
}

// A MachineHealthCheck remediation is named after the Machine and owned by
// it; the node is the Machine's status.nodeRef.
func TestSyncMachine(t *testing.T) {
	machineGVR := schema.GroupVersionResource{Group: MachineGroup, Version: "v1beta2", Resource: "machines"}
	machine := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "md-0-abcde", "namespace": "capi"},
		"status":   map[string]any{"nodeRef": map[string]any{"name": "w1"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{machineGVR: "MachineList"}, machine)
	rem := remediation(func(r *fencingv1alpha1.FencelineRemediation) {
		r.Name, r.Namespace, r.UID = "md-0-abcde", "capi", "uid-rem-m"
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "md-0-abcde", UID: "uid-machine"}}
	})
	e := newSyncEnv(t, DynamicMachineNodes(dyn), testobj.Node("w1"), rem)
	e.sync("capi/md-0-abcde").Check(t, ctrltest.Want{
		Writes: [][]string{{"create fencingrequests w1-00001"}},
		Events: []string{"Normal " + EventRequestCreated + " FencingRequest w1-00001 for node w1"},
	})
	if req := e.request("w1-00001"); req.Spec.NodeName != "w1" || req.Spec.Requester != "remediation:capi/md-0-abcde" {
		t.Errorf("request %+v", req.Spec)
	}

	// A Machine without nodeRef: nothing is created, looked at again later.
	nodeless := func(ctx context.Context, apiVersion, ns, name string) (string, string, error) {
		return "", "Machine has no status.nodeRef", nil
	}
	e2 := newSyncEnv(t, nodeless, testobj.Node("w1"), rem)
	e2.sync("capi/md-0-abcde").Check(t, ctrltest.Want{Writes: [][]string{{"update fencelineremediations/status capi/md-0-abcde"}}, After: unknownNodeRecheck})
}

// A request's event reaches the remediation that created it, whatever its
// node, and every remediation of its node, and no other.
func TestRemediationsOfRequest(t *testing.T) {
	other := remediation(func(r *fencingv1alpha1.FencelineRemediation) { r.Name, r.UID = "w2", "uid-rem-w2" })
	generated := remediation(func(r *fencingv1alpha1.FencelineRemediation) {
		r.Name, r.UID = "w1-x7k2p", "uid-rem-gen"
		r.Annotations = map[string]string{NodeNameAnnotation: "w1"}
	})
	e := newSyncEnv(t, nil, remediation(), other, generated)
	for _, tc := range []struct {
		name string
		req  *fencingv1alpha1.FencingRequest
		want []string
	}{
		{"own request", ownRequest(fencingv1alpha1.FencingPhasePending), []string{"fenceline/w1", "fenceline/w1-x7k2p"}},
		{"node's request", testobj.FencingRequest("w2"), []string{"fenceline/w2"}},
		{"own label, other node", testobj.FencingRequest("w3", func(r *fencingv1alpha1.FencingRequest) {
			r.Labels = map[string]string{RemediationUIDLabel: "uid-rem-w2"}
		}), []string{"fenceline/w2"}},
		{"unrelated", testobj.FencingRequest("w3"), nil},
	} {
		got := e.c.remediationsOf(tc.req)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
