package csiaddons_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/csiaddons"
)

// TestLive installs the CRDs into a real API server (their schema and CEL
// rules must be accepted and enforced) and runs the controller there
// against the mock driver: fence, unfence, delete.
func TestLive(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cfg := c.AdminConfig()
	if err := csiaddons.InstallCRDs(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := csiaddons.InstallCRDs(ctx, cfg); err != nil {
		t.Fatalf("installing again: %v", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nfs := dyn.Resource(csiaddons.NetworkFenceResource)

	// The API server's validation: one of driver or class, a secret
	// without a class, an enum fence state, immutable fields.
	for name, spec := range map[string]csiaddons.NetworkFenceSpec{
		"neither driver nor class": {FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}},
		"driver without secret":    {Driver: driver.DefaultName, FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}},
		"unknown state":            {NetworkFenceClassName: "mock", FenceState: "Half", Cidrs: []string{"10.0.0.1/32"}},
	} {
		_, err := nfs.Create(ctx, networkFence("invalid", spec), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: create = %v, want Invalid", name, err)
		}
	}
	defaulted := networkFence("defaulted", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "none", Cidrs: []string{"10.9.9.9/32"}})
	unstructured.RemoveNestedField(defaulted.Object, "spec", "fenceState")
	got, err := nfs.Create(ctx, defaulted, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedString(got.Object, "spec", "fenceState"); s != "Fenced" {
		t.Errorf("fenceState defaulted to %q, want Fenced", s)
	}
	_ = unstructured.SetNestedField(got.Object, "other", "spec", "networkFenceClassName")
	if _, err := nfs.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "networkFenceClassName is immutable") {
		t.Errorf("changing the class: %v, want Invalid (immutable)", err)
	}
	if err := nfs.Delete(ctx, "defaulted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	dcfg := driver.DefaultConfig()
	dcfg.StateDir = filepath.Join(dir, "state")
	dcfg.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	dcfg.NodeEndpoints = map[string]string{"node-a": "unix://" + filepath.Join(dir, "a.sock")}
	dcfg.CSIAddonsEndpoint = "unix://" + filepath.Join(dir, "addons.sock")
	dcfg.NodeAddresses = map[string][]string{"node-a": {"10.0.0.1"}}
	d, err := driver.Start(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Secrets(secretNS).Create(ctx, secret(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(csiaddons.NetworkFenceClassResource).Create(ctx, class(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- csiaddons.Run(runCtx, cfg, csiaddons.Options{Drivers: map[string]string{driver.DefaultName: d.CSIAddonsEndpoint()}})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	if _, err := nfs.Create(ctx, networkFence("node-a", csiaddons.NetworkFenceSpec{NetworkFenceClassName: "mock", FenceState: csiaddons.Fenced, Cidrs: []string{"10.0.0.1/32"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(ctx, t, nfs, "node-a", csiaddons.FenceOperationSuccessfulMessage)
	if got := d.Array().NetworkFences(); len(got) != 1 || got[0].CIDR.String() != "10.0.0.1/32" {
		t.Fatalf("array fences %v", got)
	}
	u, err := nfs.Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(u.GetFinalizers(), csiaddons.Finalizer) {
		t.Fatalf("finalizers %v", u.GetFinalizers())
	}
	// As the real controller: the finalizer's write fills spec.driver and
	// spec.secret, a spec change, so the driver is called a second time.
	for calls := 0; calls != 2; {
		recs, err := audit.ReadFile(d.AuditPath())
		if err != nil {
			t.Fatal(err)
		}
		calls = 0
		for _, r := range recs {
			if r.Method == "FenceClusterNetwork" && r.Code == "OK" {
				calls++
			}
		}
		if calls > 2 || ctx.Err() != nil {
			t.Fatalf("%d FenceClusterNetwork calls, want 2 (the create, then the finalizer's spec change)", calls)
		}
		if calls < 2 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if u, err = nfs.Get(ctx, "node-a", metav1.GetOptions{}); err != nil || u.GetGeneration() != 2 {
		t.Fatalf("generation after the finalizer = %d (err %v), want 2", u.GetGeneration(), err)
	}
	_ = unstructured.SetNestedField(u.Object, string(csiaddons.Unfenced), "spec", "fenceState")
	if _, err := nfs.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(ctx, t, nfs, "node-a", csiaddons.UnfenceOperationSuccessfulMessage)
	if got := d.Array().NetworkFences(); len(got) != 0 {
		t.Fatalf("array fences after the unfence: %v", got)
	}
	if err := nfs.Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := nfs.Get(ctx, "node-a", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the NetworkFence was not deleted: its finalizer stayed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitLive(ctx context.Context, t *testing.T, nfs dynamic.NamespaceableResourceInterface, name, msg string) {
	t.Helper()
	for {
		u, err := nfs.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			result, _, _ := unstructured.NestedString(u.Object, "status", "result")
			got, _, _ := unstructured.NestedString(u.Object, "status", "message")
			if result == string(csiaddons.FencingOperationResultSucceeded) && got == msg {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("NetworkFence %s never reached %q (last: %v)", name, msg, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
