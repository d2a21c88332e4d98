package nodefencing

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

func TestFencedSince(t *testing.T) {
	at := metav1.NewTime(time.Unix(1_800_000_000, 0))
	tests := []struct {
		name   string
		phase  fencingv1alpha1.FencingPhase
		fenced *metav1.Time
		want   time.Time
	}{
		{"fenced", fencingv1alpha1.FencingPhaseFenced, &at, at.Time},
		{"recovering is still fenced", fencingv1alpha1.FencingPhaseRecovering, &at, at.Time},
		{"fencing, not yet verified", fencingv1alpha1.FencingPhaseFencing, nil, time.Time{}},
		{"recovered is no longer fenced", fencingv1alpha1.FencingPhaseRecovered, &at, time.Time{}},
		{"fenced phase without a time", fencingv1alpha1.FencingPhaseFenced, nil, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fencingv1alpha1.FencingRequest{Status: fencingv1alpha1.FencingRequestStatus{Phase: tt.phase, FencedTime: tt.fenced}}
			if got := fencedSince(r); !got.Equal(tt.want) {
				t.Errorf("fencedSince = %v, want %v", got, tt.want)
			}
		})
	}
	if got := fencedSince(nil); !got.IsZero() {
		t.Errorf("fencedSince(nil) = %v, want zero", got)
	}
}
