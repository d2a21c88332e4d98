package fencingapi

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencingac "fenceline.io/fenceline/pkg/generated/applyconfiguration/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

// TestFencingAPI installs the generated CRDs into a real kube-apiserver and
// exercises them through the generated code.
func TestFencingAPI(t *testing.T) {
	cs := startAPI(t)
	t.Run("valid objects and defaults", func(t *testing.T) { testValidObjects(t, cs) })
	t.Run("rejected", func(t *testing.T) { testRejected(t, cs) })
	t.Run("level order", func(t *testing.T) { testLevelOrder(t, cs) })
	t.Run("informer and lister", func(t *testing.T) { testLister(t, cs) })
	t.Run("apply configuration", func(t *testing.T) { testApply(t, cs) })
	t.Run("storm guard status", func(t *testing.T) { testStormGuardStatus(t, cs) })
	t.Run("remediation contract shapes", func(t *testing.T) { testRemediationShapes(t, cs) })
}

// testValidObjects creates one object of each kind and checks the server
// filled in the documented defaults.
func testValidObjects(t *testing.T, cs versioned.Interface) {
	ctx := t.Context()
	api := cs.FencingV1alpha1()
	create := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}

	fc, err := api.FenceClasses().Create(ctx, redfishClass("redfish-forceoff"), create)
	if err != nil {
		t.Fatalf("creating FenceClass: %v", err)
	}
	if _, err := api.FenceClasses().Create(ctx, execClass("pdu-off"), create); err != nil {
		t.Fatalf("creating exec FenceClass: %v", err)
	}
	ft, err := api.FenceTargets().Create(ctx, fenceTarget("worker-1"), create)
	if err != nil {
		t.Fatalf("creating FenceTarget: %v", err)
	}
	fp, err := api.FencePolicies().Create(ctx, fencePolicy("workers"), create)
	if err != nil {
		t.Fatalf("creating FencePolicy: %v", err)
	}
	fr, err := api.FencingRequests().Create(ctx, fencingRequest("worker-1-fence", "worker-1"), create)
	if err != nil {
		t.Fatalf("creating FencingRequest: %v", err)
	}

	// The controller's write path: the status subresource.
	fr.Status.Phase = fencingv1alpha1.FencingPhaseTriaged
	fr.Status.Attempts = []fencingv1alpha1.FenceAttempt{{
		Level: 1, FenceClass: "redfish-forceoff", Method: "Redfish", StartTime: metav1.Now(),
		Result: fencingv1alpha1.FenceAttemptSucceeded, VerifiedPowerState: "Off",
	}}
	if fr, err = api.FencingRequests().UpdateStatus(ctx, fr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating FencingRequest status: %v", err)
	}
	ft.Status.PowerState = fencingv1alpha1.PowerStateOn
	ft.Status.Conditions = []metav1.Condition{{
		Type: fencingv1alpha1.FenceTargetReachable, Status: metav1.ConditionTrue, Reason: "ProbeSucceeded",
		LastTransitionTime: metav1.Now(),
	}}
	if _, err := api.FenceTargets().UpdateStatus(ctx, ft, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating FenceTarget status: %v", err)
	}

	checks := []struct {
		name      string
		got, want any
	}{
		{"FenceClass action", fc.Spec.Action, fencingv1alpha1.FenceActionOff},
		{"FenceClass verify", fc.Spec.Verify, fencingv1alpha1.VerifyPowerState},
		{"FenceClass retries", ptr.Deref(fc.Spec.Retries, -1), int32(2)},
		{"FenceClass action timeout", fc.Spec.Timeouts.Action, &metav1.Duration{Duration: 10 * time.Second}},
		{"FenceClass verify timeout", fc.Spec.Timeouts.Verify, &metav1.Duration{Duration: 15 * time.Second}},
		{"FenceClass poll interval", fc.Spec.Timeouts.PollInterval, &metav1.Duration{Duration: time.Second}},
		{"FenceClass redfish resetType", fc.Spec.Redfish.ResetType, "ForceOff"},
		{"FencePolicy approval", fp.Spec.Detection.Approval, fencingv1alpha1.ApprovalAutomatic},
		{"FencePolicy leaseStaleAfter", fp.Spec.Detection.LeaseStaleAfter, &metav1.Duration{Duration: 20 * time.Second}},
		{"FencePolicy level timeout", fp.Spec.Levels[0].Timeout, &metav1.Duration{Duration: 20 * time.Second}},
		{"FencePolicy storageFence", fp.Spec.StorageFence, fencingv1alpha1.StorageFenceRequired},
		{"FencePolicy maxConcurrentFencing", fp.Spec.StormGuard.MaxConcurrentFencing, int32(1)},
		{"FencePolicy maxUnhealthy (set)", fp.Spec.StormGuard.MaxUnhealthy.String(), "40%"},
		{"FencePolicy rate burst", fp.Spec.StormGuard.Rate.Burst, int32(2)},
		{"FencePolicy rate qps", fp.Spec.StormGuard.Rate.QPS.String(), "100m"},
		{"FencePolicy zoneLabel", fp.Spec.StormGuard.ZoneLabel, "topology.kubernetes.io/zone"},
		{"FencePolicy maxAttempts", fp.Spec.StormGuard.MaxAttempts, int32(5)},
		{"FencePolicy outOfServiceTaint", fp.Spec.Recovery.OutOfServiceTaint, "Apply"},
		{"FencePolicy unfence", fp.Spec.Recovery.Unfence, "OnNewBootID"},
		{"FencingRequest action", fr.Spec.Action, fencingv1alpha1.FenceActionOff},
		{"FencingRequest phase", fr.Status.Phase, fencingv1alpha1.FencingPhaseTriaged},
	}
	for _, c := range checks {
		if !equalJSON(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// equalJSON compares pointers by value, for the defaults table.
func equalJSON(a, b any) bool {
	if d, ok := a.(*metav1.Duration); ok {
		w, _ := b.(*metav1.Duration)
		return d != nil && w != nil && d.Duration == w.Duration
	}
	return a == b
}

// testLister creates a FenceTarget after the informer has synced and waits
// for it to show up in the generated lister.
func testLister(t *testing.T, cs versioned.Interface) {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	// Shutdown waits for the informers, which stop only once ctx is done.
	defer func() { cancel(); factory.Shutdown() }()
	lister := factory.Fencing().V1alpha1().FenceTargets().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	if _, err := cs.FencingV1alpha1().FenceTargets().Create(ctx, fenceTarget("worker-lister"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		ft, err := lister.Get("worker-lister")
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(ft.Spec.Endpoints) == 2, err
	})
	if err != nil {
		t.Fatalf("FenceTarget worker-lister never reached the lister: %v", err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), factory.Fencing().V1alpha1().FenceTargets().Informer().HasSynced) {
		t.Fatal("informer lost sync")
	}
}

// testApply creates a FencePolicy by server-side apply through the
// generated apply configurations.
func testApply(t *testing.T, cs versioned.Interface) {
	ctx := t.Context()
	ac := fencingac.FencePolicy("applied").WithSpec(fencingac.FencePolicySpec().
		WithLevels(fencingac.FenceLevel().WithIndex(1).WithFenceClassNames("redfish-forceoff")).
		WithStormGuard(fencingac.StormGuard().WithMaxUnhealthy(intstr.FromInt32(3))))
	fp, err := cs.FencingV1alpha1().FencePolicies().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "fencingapi-test", Force: true})
	if err != nil {
		t.Fatalf("applying FencePolicy: %v", err)
	}
	if got := fp.Spec.StormGuard.MaxUnhealthy; got == nil || got.IntValue() != 3 {
		t.Errorf("maxUnhealthy = %v, want 3", got)
	}
	if !strings.Contains(fp.ManagedFields[0].Manager, "fencingapi-test") {
		t.Errorf("managed by %q, want fencingapi-test", fp.ManagedFields[0].Manager)
	}
}
