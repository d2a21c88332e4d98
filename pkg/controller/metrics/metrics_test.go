package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// taint-eviction's, under kube-controller-manager's names.
	m.ObserveTaintEviction(now.Add(-2*time.Second), now)
	m.ObserveTaintEviction(time.Time{}, now)
	m.SetTaintEvictionHeld(3)
	m.ObserveTaintEvictionRefusal("RateLimited")
	m.SetUpstreamTaintEviction(true)

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
		"pod_gc_collector_force_delete_pods_total":                      2,
		"pod_gc_collector_force_delete_pod_errors_total":                1,
		"fenceline_controller_force_delete_latency_seconds_count":       1,
		"taint_eviction_controller_pod_deletions_total":                 2,
		"taint_eviction_controller_pod_deletion_duration_seconds_count": 1,
		"taint_eviction_controller_pod_deletion_duration_seconds_sum":   2,
		"fenceline_taint_eviction_held_pods":                            3,
		"fenceline_taint_eviction_storm_guard_refusals_total":           1,
		"fenceline_taint_eviction_upstream_controller_active":           1,
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
}
