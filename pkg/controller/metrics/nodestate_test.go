package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNodeState(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 500_000_000)
	type update struct {
		node        string
		fencedSince time.Time
		failed      bool
		quarantined time.Time
	}
	tests := []struct {
		name    string
		updates []update
		// want maps node to the expected value of each gauge; a missing
		// node must have no series.
		wantFenced, wantFailed, wantQuarantined map[string]float64
	}{
		{
			name:            "fenced and quarantined",
			updates:         []update{{node: "a", fencedSince: t0}, {node: "b", quarantined: t0.Add(time.Second)}},
			wantFenced:      map[string]float64{"a": 1_800_000_000.5},
			wantQuarantined: map[string]float64{"b": 1_800_000_001.5},
		},
		{
			name:    "unfenced and unquarantined nodes lose their series",
			updates: []update{{node: "a", fencedSince: t0, quarantined: t0}, {node: "a"}},
		},
		{
			name:       "failed stays until the request is gone",
			updates:    []update{{node: "a", failed: true}, {node: "b", failed: true}, {node: "b"}},
			wantFailed: map[string]float64{"a": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range tt.updates {
				m.SetNodeFencing(u.node, u.fencedSince, u.failed)
				m.SetQuarantinedSince(u.node, u.quarantined)
			}
			for _, g := range []struct {
				vec  *prometheus.GaugeVec
				want map[string]float64
			}{{m.FencedSince, tt.wantFenced}, {m.FencingFailed, tt.wantFailed}, {m.QuarantinedSince, tt.wantQuarantined}} {
				if n := testutil.CollectAndCount(g.vec); n != len(g.want) {
					t.Errorf("%d series, want %d", n, len(g.want))
				}
				for node, want := range g.want {
					if got := testutil.ToFloat64(g.vec.WithLabelValues(node)); got != want {
						t.Errorf("node %s = %v, want %v", node, got, want)
					}
				}
			}
		})
	}
}

func TestFencingRefusals(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveFencingRefusal("StormActive")
	m.ObserveFencingRefusal("StormActive")
	m.ObserveFencingRefusal("RateLimited")
	for reason, want := range map[string]float64{"StormActive": 2, "RateLimited": 1} {
		if got := testutil.ToFloat64(m.StormGuardRefusals.WithLabelValues(reason)); got != want {
			t.Errorf("refusals %s = %v, want %v", reason, got, want)
		}
	}
	var nilMetrics *Metrics // callers without metrics must not panic
	nilMetrics.ObserveFencingRefusal("StormActive")
	nilMetrics.SetNodeFencing("a", time.Now(), true)
	nilMetrics.SetQuarantinedSince("a", time.Now())
}
