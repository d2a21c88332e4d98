package csiaddons_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/test/csiaddons"
)

// rig is the stand-in controller against a fake API server, calling a mock
// driver (node-a at 10.0.0.1, node-b at 10.0.0.2) over its csi-addons
// unix socket.
type rig struct {
	t    *testing.T
	ctx  context.Context
	d    *driver.Driver
	dyn  *dynamicfake.FakeDynamicClient
	kube *kubefake.Clientset

	mu       sync.Mutex
	statuses map[string][]string // NetworkFence -> "result: message" in the order written
}

func newRig(t *testing.T, objs ...runtime.Object) *rig {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	cfg := driver.DefaultConfig()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	cfg.NodeEndpoints = map[string]string{"node-a": "unix://" + filepath.Join(dir, "a.sock"), "node-b": "unix://" + filepath.Join(dir, "b.sock")}
	cfg.CSIAddonsEndpoint = "unix://" + filepath.Join(dir, "addons.sock")
	cfg.NodeAddresses = map[string][]string{"node-a": {"10.0.0.1"}, "node-b": {"10.0.0.2"}}
	d, err := driver.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	r := &rig{t: t, ctx: ctx, d: d, statuses: map[string][]string{}}
	var dynObjs, kubeObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			dynObjs = append(dynObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	r.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		csiaddons.NetworkFenceResource:      "NetworkFenceList",
		csiaddons.NetworkFenceClassResource: "NetworkFenceClassList",
	}, dynObjs...)
	r.dyn.PrependReactor("update", "networkfences", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			u := a.(clienttesting.UpdateAction).GetObject().(*unstructured.Unstructured)
			result, _, _ := unstructured.NestedString(u.Object, "status", "result")
			msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
			r.mu.Lock()
			r.statuses[u.GetName()] = append(r.statuses[u.GetName()], result+": "+msg)
			r.mu.Unlock()
		}
		return false, nil, nil
	})
	r.kube = kubefake.NewClientset(kubeObjs...)

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	c := csiaddons.New(r.dyn, r.kube, csiaddons.Options{
		Drivers:        map[string]string{driver.DefaultName: d.CSIAddonsEndpoint()},
		Timeout:        10 * time.Second,
		RetryBaseDelay: 5 * time.Millisecond,
		RetryMaxDelay:  50 * time.Millisecond,
	})
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

const (
	secretNS   = "storage"
	secretName = "fence-secret"
)

func secret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretNS, Name: secretName}, Data: map[string][]byte{"userKey": []byte("s3cret")}}
}

func class() *unstructured.Unstructured {
	c := &csiaddons.NetworkFenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "mock"},
		Spec: csiaddons.NetworkFenceClassSpec{Provisioner: driver.DefaultName, Parameters: map[string]string{
			"clusterID":                        "c1",
			csiaddons.SecretNameParameter:      secretName,
			csiaddons.SecretNamespaceParameter: secretNS,
		}},
	}
	u, err := c.ToUnstructured()
	if err != nil {
		panic(err)
	}
	return u
}

func networkFence(name string, spec csiaddons.NetworkFenceSpec) *unstructured.Unstructured {
	nf := &csiaddons.NetworkFence{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}, Spec: spec}
	u, err := nf.ToUnstructured()
	if err != nil {
		panic(err)
	}
	return u
}

func (r *rig) create(u *unstructured.Unstructured) {
	r.t.Helper()
	if _, err := r.dyn.Resource(csiaddons.NetworkFenceResource).Create(r.ctx, u, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) get(name string) *csiaddons.NetworkFence {
	r.t.Helper()
	u, err := r.dyn.Resource(csiaddons.NetworkFenceResource).Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	nf, err := csiaddons.NetworkFenceFrom(u)
	if err != nil {
		r.t.Fatal(err)
	}
	return nf
}

// change applies fn to the NetworkFence and bumps its generation, as an
// API server does for a spec change or the deletion of an object with
// finalizers.
func (r *rig) change(name string, fn func(u *unstructured.Unstructured)) {
	r.t.Helper()
	res := r.dyn.Resource(csiaddons.NetworkFenceResource)
	u, err := res.Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	fn(u)
	u.SetGeneration(u.GetGeneration() + 1)
	if _, err := res.Update(r.ctx, u, metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) waitStatus(name string, result csiaddons.FencingOperationResult, msg string) *csiaddons.NetworkFence {
	r.t.Helper()
	var nf *csiaddons.NetworkFence
	r.waitFor(fmt.Sprintf("NetworkFence %s: %s %q", name, result, msg), func() bool {
		nf = r.get(name)
		return nf.Status.Result == result && strings.Contains(nf.Status.Message, msg)
	})
	return nf
}

func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reads counts the controller's reads of the NetworkFence: one per
// handling, since every handling starts with a fresh read.
func (r *rig) reads(name string) int {
	n := 0
	for _, a := range r.dyn.Actions() {
		if g, ok := a.(clienttesting.GetAction); ok && a.GetVerb() == "get" && a.GetResource().Resource == "networkfences" && g.GetName() == name {
			n++
		}
	}
	return n
}

func (r *rig) history(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.statuses[name])
}

func (r *rig) fences() []string {
	var out []string
	for _, f := range r.d.Array().NetworkFences() {
		out = append(out, f.CIDR.String())
	}
	return out
}

func (r *rig) calls(method string) []audit.Record {
	r.t.Helper()
	recs, err := audit.ReadFile(r.d.AuditPath())
	if err != nil {
		r.t.Fatal(err)
	}
	return audit.Filter(recs, audit.Method(method))
}

func TestFenceThenUnfence(t *testing.T) {
	r := newRig(t, class(), secret())
	r.create(networkFence("node-a", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}}))
	nf := r.waitStatus("node-a", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
	if nf.Status.Message != "fencing operation successful" {
		t.Errorf("message %q", nf.Status.Message)
	}
	if !slices.Contains(nf.Finalizers, "csiaddons.openshift.io/network-fence") {
		t.Errorf("finalizers %v: want the csi-addons one", nf.Finalizers)
	}
	if got := r.fences(); !slices.Equal(got, []string{"10.0.0.1/32"}) {
		t.Fatalf("array fences %v", got)
	}
	// The class's secret reached the driver as secrets, its other
	// parameters as parameters, its reserved ones not at all.
	calls := r.calls("FenceClusterNetwork")
	if len(calls) != 1 || calls[0].Message != "cidrs=10.0.0.1/32 secrets=userKey parameters=clusterID" {
		t.Fatalf("FenceClusterNetwork calls %+v", calls)
	}

	r.change("node-a", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, string(csiaddons.Unfenced), "spec", "fenceState")
	})
	r.waitStatus("node-a", csiaddons.FencingOperationResultSucceeded, csiaddons.UnfenceOperationSuccessfulMessage)
	if got := r.fences(); len(got) != 0 {
		t.Fatalf("array fences after the unfence: %v", got)
	}
	if n := len(r.calls("FenceClusterNetwork")); n != 1 {
		t.Errorf("%d fence calls: the controller's own updates must not start another", n)
	}
	if got := r.history("node-a"); !slices.Equal(got, []string{"Succeeded: fencing operation successful", "Succeeded: unfencing operation successful"}) {
		t.Errorf("status history %q", got)
	}
}

func TestFailureThenSuccess(t *testing.T) {
	r := newRig(t, class(), secret())
	r.d.Faults().Set([]faults.Fault{faults.FailNext("FenceClusterNetwork", 2, codes.Unavailable)})
	r.create(networkFence("node-b", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.2/32"}}))
	r.waitStatus("node-b", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
	h := r.history("node-b")
	if len(h) != 3 || !strings.HasPrefix(h[0], "Failed: rpc error: code = Unavailable") || h[1] != h[0] {
		t.Fatalf("status history %q: want two failures with the error's text, then success", h)
	}
	if n := len(r.calls("FenceClusterNetwork")); n != 3 {
		t.Fatalf("%d fence calls, want 3", n)
	}
	if got := r.fences(); !slices.Equal(got, []string{"10.0.0.2/32"}) {
		t.Fatalf("array fences %v", got)
	}
}

func TestMissingSecretFailsUntilItExists(t *testing.T) {
	r := newRig(t, class())
	r.create(networkFence("node-a", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}}))
	r.waitStatus("node-a", csiaddons.FencingOperationResultFailed, "code = InvalidArgument")
	if n := len(r.calls("FenceClusterNetwork")); n != 0 {
		t.Fatalf("%d fence calls without the Secret", n)
	}
	if _, err := r.kube.CoreV1().Secrets(secretNS).Create(r.ctx, secret(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitStatus("node-a", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
}

func TestDeprecatedSpec(t *testing.T) {
	r := newRig(t, secret())
	r.create(networkFence("node-a", csiaddons.NetworkFenceSpec{
		Driver: driver.DefaultName, FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.0/24"},
		Secret: &csiaddons.SecretSpec{Name: secretName, Namespace: secretNS}, Parameters: map[string]string{"pool": "p1"},
	}))
	r.waitStatus("node-a", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
	calls := r.calls("FenceClusterNetwork")
	if len(calls) != 1 || calls[0].Message != "cidrs=10.0.0.0/24 secrets=userKey parameters=pool" {
		t.Fatalf("FenceClusterNetwork calls %+v", calls)
	}
}

func TestValidationFailureIsNotRetried(t *testing.T) {
	tests := []struct {
		name string
		spec csiaddons.NetworkFenceSpec
		want string
	}{
		{name: "no driver", spec: csiaddons.NetworkFenceSpec{FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}}, want: "Failed to validate Networkfence parameters: required parameter driver is not specified"},
		{name: "class without cidrs", spec: csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced}, want: "Failed to validate Networkfence parameters: required parameter spec.cidrs is not specified"},
		{name: "driver without cidrs", spec: csiaddons.NetworkFenceSpec{Driver: driver.DefaultName, FenceState: csiaddons.Fenced}, want: "Failed to validate Networkfence parameters: required parameter cidrs is not specified"},
		{name: "unknown state", spec: csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: "Half", Cidrs: []string{"10.0.0.1/32"}}, want: `unknown fenceState "Half"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, class(), secret())
			r.create(networkFence("bad", tc.spec))
			nf := r.waitStatus("bad", csiaddons.FencingOperationResultFailed, tc.want)
			if len(nf.Finalizers) != 0 {
				t.Errorf("finalizers %v on an invalid NetworkFence", nf.Finalizers)
			}
			if n := len(r.calls("FenceClusterNetwork")) + len(r.calls("UnfenceClusterNetwork")); n != 0 {
				t.Errorf("%d calls for an invalid spec", n)
			}
			// A retry would be queued 5 ms after the failure, ahead of a
			// NetworkFence created now, and would write Failed again: once
			// that one is handled, a retry of the invalid one would show.
			r.create(networkFence("sentinel", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.9/32"}}))
			r.waitStatus("sentinel", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
			if h := r.history("bad"); len(h) != 1 {
				t.Errorf("status history %q: an invalid spec must not be retried", h)
			}
		})
	}
}

func TestUnknownDriverIsRetriedWithoutStatus(t *testing.T) {
	r := newRig(t, secret())
	r.create(networkFence("node-a", csiaddons.NetworkFenceSpec{
		Driver: "other.example.com", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"},
		Secret: &csiaddons.SecretSpec{Name: secretName, Namespace: secretNS},
	}))
	r.waitFor("three tries at the unknown driver", func() bool { return r.reads("node-a") >= 3 })
	nf := r.get("node-a")
	if nf.Status.Result != "" || len(nf.Finalizers) != 0 {
		t.Fatalf("status %+v, finalizers %v: a driver that cannot be reached leaves both alone", nf.Status, nf.Finalizers)
	}
}

func TestDeletionKeepsTheStorageFence(t *testing.T) {
	r := newRig(t, class(), secret())
	r.create(networkFence("node-a", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}}))
	r.waitStatus("node-a", csiaddons.FencingOperationResultSucceeded, csiaddons.FenceOperationSuccessfulMessage)
	now := metav1.Now()
	r.change("node-a", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) })
	r.waitFor("the finalizer removed", func() bool { return len(r.get("node-a").Finalizers) == 0 })
	if got := r.fences(); !slices.Equal(got, []string{"10.0.0.1/32"}) {
		t.Fatalf("array fences after the deletion: %v, want the fence kept", got)
	}
	if n := len(r.calls("UnfenceClusterNetwork")); n != 0 {
		t.Fatalf("%d unfence calls on deletion", n)
	}
}
