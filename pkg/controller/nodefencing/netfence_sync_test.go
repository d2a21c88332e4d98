package nodefencing

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/names"
)

// netEnv is env with a fake dynamic client and discovery that serve the
// csi-addons NetworkFence kinds, and a NetworkFenceClass "nf" of driver
// disk.example.com.
type netEnv struct {
	*env
	dyn *dynamicfake.FakeDynamicClient
}

func newNetEnv(t *testing.T, now time.Time) *netEnv {
	t.Helper()
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "NetworkFenceClass",
		"metadata": map[string]any{"name": "nf"},
		"spec":     map[string]any{"provisioner": "disk.example.com"},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		networkfence.Resource: "NetworkFenceList", networkfence.ClassResource: "NetworkFenceClassList",
	}, class)
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{Resources: []*metav1.APIResourceList{{
		GroupVersion: "csiaddons.openshift.io/v1alpha1",
		APIResources: []metav1.APIResource{{Name: "networkfences", Kind: "NetworkFence"}, {Name: "networkfenceclasses", Kind: "NetworkFenceClass"}},
	}}}}
	objs := cluster(now, []testobj.NodeOption{testobj.Address(v1.NodeInternalIP, "10.0.0.7")})
	objs[0] = testobj.FencePolicy("p", testobj.NetworkFences("nf"))
	e := startEnvWith(t, now, true, func(c *Config) { c.Dynamic, c.Discovery = dyn, disc }, objs...)
	e.c.netFences.Start(e.Ctx)
	return &netEnv{env: e, dyn: dyn}
}

// fence returns the request's one NetworkFence as the API server has it.
func (e *netEnv) fence(r *fencingv1alpha1.FencingRequest) *unstructured.Unstructured {
	e.t.Helper()
	u, err := e.dyn.Resource(networkfence.Resource).Get(e.Ctx, networkfence.Name(r.Name, "nf"), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// answer writes the csi-addons controller's answer on the NetworkFence and
// waits until node-fencing's cache shows it.
func (e *netEnv) answer(r *fencingv1alpha1.FencingRequest, result, message string) {
	e.t.Helper()
	u := e.fence(r)
	_ = unstructured.SetNestedField(u.Object, result, "status", "result")
	_ = unstructured.SetNestedField(u.Object, message, "status", "message")
	if _, err := e.dyn.Resource(networkfence.Resource).UpdateStatus(e.Ctx, u, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitCache(r, func(fs []networkfence.Fence) bool {
		return len(fs) == 1 && fs[0].Message == message && fs[0].Result == result
	})
}

func (e *netEnv) waitCache(r *fencingv1alpha1.FencingRequest, ok func([]networkfence.Fence) bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.Ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		fs, err := e.c.netFences.FencesOf(ctx, r.UID)
		return err == nil && ok(fs), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for the NetworkFence cache: %v", err)
	}
}

// TestSyncNetworkFence: the storage fence method NetworkFence through the
// controller's writes, on fake API servers: the NetworkFence recorded and
// made once the node is Fenced, the out-of-service taint held until the
// storage confirmed it, and on recovery the NetworkFence unfenced, then
// deleted, and only then the node unfenced.
func TestSyncNetworkFence(t *testing.T) {
	now := testobj.Epoch
	e := newNetEnv(t, now)
	r := e.fenceToFenced()
	u := e.fence(r)
	nf := networkfence.FromUnstructured(u)
	if nf.Class != "nf" || nf.FenceState != networkfence.StateFenced || !slices.Equal(nf.CIDRs, []string{"10.0.0.7/32"}) ||
		u.GetLabels()[networkfence.RequestLabel] != string(r.UID) || u.GetAnnotations()[networkfence.NodeAnnotation] != "n1" {
		t.Fatalf("NetworkFence = %+v, labels %v, annotations %v", nf, u.GetLabels(), u.GetAnnotations())
	}
	r = e.request("n1")
	if i := slices.IndexFunc(r.Status.Storage, func(s fencingv1alpha1.StorageFenceStatus) bool { return s.Driver == "disk.example.com" }); i < 0 ||
		!slices.Equal(r.Status.Storage[i].NetworkFences, []string{nf.Name}) {
		t.Fatalf("status.storage = %+v, want %s listed under disk.example.com", r.Status.Storage, nf.Name)
	}
	e.waitCache(r, func(fs []networkfence.Fence) bool { return len(fs) == 1 })
	for range 2 {
		e.sync("n1")
		e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint)
	}
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonNetworkFencePending)

	e.answer(r, networkfence.ResultFailed, "rpc error: code = Unavailable")
	e.sync("n1")
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint)
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonNetworkFenceFailed)

	e.answer(r, networkfence.ResultSucceeded, networkfence.FencedMessage)
	e.sync("n1")
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)

	e.comesBack("boot-2")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.sync("n1")
	if got := networkfence.FromUnstructured(e.fence(r)); got.FenceState != networkfence.StateUnfenced {
		t.Fatalf("after the recovery's first step the NetworkFence is %s, want Unfenced", got.FenceState)
	}
	e.waitCache(r, func(fs []networkfence.Fence) bool {
		return len(fs) == 1 && fs[0].FenceState == networkfence.StateUnfenced
	})
	// The fence's Succeeded is still there: not an unfence.
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonNetworkUnfencePending)

	e.answer(r, networkfence.ResultSucceeded, networkfence.UnfencedMessage)
	e.sync("n1")
	if _, err := e.dyn.Resource(networkfence.Resource).Get(e.Ctx, nf.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a confirmed unfence: the NetworkFence is still there (err %v)", err)
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.waitCache(r, func(fs []networkfence.Fence) bool { return len(fs) == 0 })
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	e.wantNode("n1", nil)
}
