package nodefencing

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

// A node has a fenced-since or failed series only while that state holds.
func TestNodeFencingMetrics(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 500_000_000)
	type update struct {
		node        string
		fencedSince time.Time
		failed      bool
	}
	tests := []struct {
		name                   string
		updates                []update
		wantFenced, wantFailed map[string]float64 // a node not listed has no series
	}{
		{name: "fenced", updates: []update{{node: "a", fencedSince: t0}}, wantFenced: map[string]float64{"a": 1_800_000_000.5}},
		{name: "unfenced nodes lose their series", updates: []update{{node: "a", fencedSince: t0}, {node: "a"}}},
		{name: "failed stays until the request is gone", updates: []update{{node: "a", failed: true}, {node: "b", failed: true}, {node: "b"}}, wantFailed: map[string]float64{"a": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics()
			for _, u := range tt.updates {
				m.SetNodeFencing(u.node, u.fencedSince, u.failed)
			}
			check := func(what string, n int, want map[string]float64, value func(string) float64) {
				if n != len(want) {
					t.Errorf("%s: %d series, want %d", what, n, len(want))
				}
				for node, w := range want {
					if got := value(node); got != w {
						t.Errorf("%s of node %s = %v, want %v", what, node, got, w)
					}
				}
			}
			check("fenced since", testutil.CollectAndCount(m.FencedSince), tt.wantFenced, func(n string) float64 { return testutil.ToFloat64(m.FencedSince.WithLabelValues(n)) })
			check("failed", testutil.CollectAndCount(m.FencingFailed), tt.wantFailed, func(n string) float64 { return testutil.ToFloat64(m.FencingFailed.WithLabelValues(n)) })
		})
	}
	var none *Metrics // a controller built without metrics records nothing
	none.ObserveFencingPhase("Fenced", "x", t0, t0)
	none.SetNodeFencing("a", t0, true)
	none.ObserveFencingRefusal("StormActive")
	none.SetLyingFence("a", true)
	none.ObserveLyingFenceCaught()
}

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
