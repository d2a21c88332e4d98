package fencingapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
)

// testStormGuardStatus: the storm guard's state round-trips through the
// FencePolicy status subresource exactly as the controller restores it,
// and an update of the spec (an operator's kubectl apply) keeps it.
func testStormGuardStatus(t *testing.T, cs versioned.Interface) {
	ctx := t.Context()
	api := cs.FencingV1alpha1().FencePolicies()
	fp, err := api.Create(ctx, fencePolicy("storm-state"), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatalf("creating FencePolicy: %v", err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	saved := stormguard.Saved{Tokens: 1.25, BucketTime: at.Add(-time.Second), LastExit: at.Add(-10 * time.Second), Written: at}
	fp.Status.StormGuard = nodefencing.GuardStatus(saved)
	if fp, err = api.UpdateStatus(ctx, fp, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating FencePolicy status: %v", err)
	}
	fp.Spec.StormGuard.Rate.Burst = 3
	fp.Status = fencingv1alpha1.FencePolicyStatus{}
	if _, err := api.Update(ctx, fp, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating FencePolicy spec: %v", err)
	}
	got, err := api.Get(ctx, fp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.StormGuard.Rate.Burst != 3 {
		t.Errorf("spec update lost: burst %d", got.Spec.StormGuard.Rate.Burst)
	}
	restored := nodefencing.SavedGuard(got.Status.StormGuard)
	if restored == nil || !sameSaved(*restored, saved) {
		t.Errorf("status after a spec update = %+v, want %+v (the spec write must not touch it)", restored, saved)
	}
}

// sameSaved compares saved states by their instants (the API server's
// times come back in another location).
func sameSaved(a, b stormguard.Saved) bool {
	return a.Tokens == b.Tokens && a.StormActive == b.StormActive && a.BucketTime.Equal(b.BucketTime) &&
		a.StormSince.Equal(b.StormSince) && a.LastExit.Equal(b.LastExit) && a.Written.Equal(b.Written)
}
