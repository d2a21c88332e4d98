package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.ObserveForceDelete("ns", ReasonOutOfService, now.Add(-300*time.Millisecond), now)
	m.ObserveForceDelete("ns", ReasonOutOfService, time.Time{}, now) // trigger unknown: counted, no latency sample
	m.ObserveForceDeleteError("ns", ReasonSafeDetach)
	m.ObserveDecisionChanged("force-delete")

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			switch {
			case s.GetCounter() != nil:
				got[mf.GetName()] += s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				got[mf.GetName()] += s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				got[mf.GetName()+"_count"] += float64(s.GetHistogram().GetSampleCount())
				got[mf.GetName()+"_sum"] += s.GetHistogram().GetSampleSum()
			}
		}
	}
	for name, want := range map[string]float64{
		"pod_gc_collector_force_delete_pods_total":                2,
		"pod_gc_collector_force_delete_pod_errors_total":          1,
		"fenceline_controller_force_delete_latency_seconds_count": 1,
		"fenceline_controller_decision_changed_total":             1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	if s := got["fenceline_controller_force_delete_latency_seconds_sum"]; s < 0.29 || s > 0.31 {
		t.Errorf("latency sum = %v, want 0.3", s)
	}
	if _, err := New(reg); err == nil {
		t.Error("registering twice must fail, not panic")
	}
	var nilMetrics *Metrics
	nilMetrics.ObserveForceDelete("ns", ReasonForceEviction, now, now) // must not panic
	nilMetrics.ObserveDecisionChanged("force-delete")
}

func TestSetOrDelete(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"node"})
	SetOrDelete(g, "a", true, 2)
	SetOrDelete(g, "b", true, 3)
	SetOrDelete(g, "b", false, 3)
	SetOrDelete(g, "c", false, 1) // deleting a series that is not there is fine
	if n := testutil.CollectAndCount(g); n != 1 {
		t.Fatalf("%d series, want 1 (node a)", n)
	}
	if got := testutil.ToFloat64(g.WithLabelValues("a")); got != 2 {
		t.Errorf("node a = %v, want 2", got)
	}
	if got := UnixSeconds(time.Unix(1_800_000_000, 500_000_000)); got != 1_800_000_000.5 {
		t.Errorf("UnixSeconds = %v, want 1800000000.5", got)
	}
}
