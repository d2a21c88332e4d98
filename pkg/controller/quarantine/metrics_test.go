package quarantine

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/pkg/controller/actuator"
)

func newMetricsController(t *testing.T, now *time.Time) (*Controller, *Metrics) {
	t.Helper()
	m := NewMetrics()
	return &Controller{
		act: &actuator.Actuator{}, metrics: m, now: func() time.Time { return *now },
		refused: map[types.UID]string{}, refusedNow: map[types.UID]bool{}, quarantined: map[string]time.Time{},
	}, m
}

// The quarantined-since series keeps the time the node was first seen
// quarantined across later syncs, and goes when the taint does.
func TestQuarantinedSinceMetric(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	c, m := newMetricsController(t, &now)
	steps := []struct {
		node      string
		on        bool
		advance   time.Duration
		wantSince map[string]float64
	}{
		{node: "a", on: true, wantSince: map[string]float64{"a": 1_800_000_000}},
		{node: "a", on: true, advance: time.Minute, wantSince: map[string]float64{"a": 1_800_000_000}},
		{node: "b", on: true, advance: time.Minute, wantSince: map[string]float64{"a": 1_800_000_000, "b": 1_800_000_120}},
		{node: "a", on: false, wantSince: map[string]float64{"b": 1_800_000_120}},
		{node: "a", on: true, advance: time.Minute, wantSince: map[string]float64{"a": 1_800_000_180, "b": 1_800_000_120}},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		c.setQuarantined(s.node, s.on)
		if n := testutil.CollectAndCount(m.QuarantinedSince); n != len(s.wantSince) {
			t.Fatalf("step %d: %d quarantined-since series, want %d", i, n, len(s.wantSince))
		}
		for node, want := range s.wantSince {
			if got := testutil.ToFloat64(m.QuarantinedSince.WithLabelValues(node)); got != want {
				t.Errorf("step %d: node %s quarantined since %v, want %v", i, node, got, want)
			}
		}
		if got := testutil.ToFloat64(m.QuarantinedNodes); got != float64(len(s.wantSince)) {
			t.Errorf("step %d: quarantined nodes = %v, want %d", i, got, len(s.wantSince))
		}
	}
}

func TestSafeDetachRefusedPodsMetric(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, m := newMetricsController(t, &now)
	steps := []struct {
		pod     types.UID
		refused bool
		want    float64
	}{
		{"p1", true, 1},
		{"p1", true, 1}, // the same pod refused again counts once
		{"p2", true, 2},
		{"p1", false, 1}, // evidence appeared, or the pod is gone
		{"p3", false, 1},
		{"p2", false, 0},
	}
	for i, s := range steps {
		c.setRefusedNow(s.pod, s.refused)
		if got := testutil.ToFloat64(m.SafeDetachRefusedPods); got != s.want {
			t.Errorf("step %d: refused pods = %v, want %v", i, got, s.want)
		}
	}
}
