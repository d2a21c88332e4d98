package tainteviction

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"fenceline.io/fenceline/pkg/controller/metrics"
)

// The deletions keep kube-controller-manager's names; Fenceline's own
// gauges and counters sit beside them.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	if err := metrics.Register(reg, m.Collectors()...); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.observeEviction(now.Add(-2*time.Second), now)
	m.observeEviction(time.Time{}, now) // not due at a known time: counted, no latency
	m.setHeld(3)
	m.observeRefusal("RateLimited")
	m.setUpstream(true)
	const want = `
# HELP taint_eviction_controller_pod_deletions_total Total number of Pods deleted by TaintEvictionController since its start.
# TYPE taint_eviction_controller_pod_deletions_total counter
taint_eviction_controller_pod_deletions_total 2
# HELP fenceline_taint_eviction_held_pods Pods whose taint eviction is due but held: a stateful pod of a node that is not Ready and not yet cut off from storage, a pod waiting for its evict-when condition, or a node the storm guard refuses.
# TYPE fenceline_taint_eviction_held_pods gauge
fenceline_taint_eviction_held_pods 3
# HELP fenceline_taint_eviction_upstream_controller_active 1 while kube-controller-manager's taint-eviction-controller is evidently running as well (its TaintManagerEviction Events appear); Fenceline's taint-eviction then evicts nothing.
# TYPE fenceline_taint_eviction_upstream_controller_active gauge
fenceline_taint_eviction_upstream_controller_active 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "taint_eviction_controller_pod_deletions_total", "fenceline_taint_eviction_held_pods", "fenceline_taint_eviction_upstream_controller_active"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(m.EvictionLatency); got != 1 {
		t.Errorf("latency histograms = %d, want 1", got)
	}
	if got := testutil.ToFloat64(m.Refusals.WithLabelValues("RateLimited")); got != 1 {
		t.Errorf("refusals = %v, want 1", got)
	}
	m.setUpstream(false)
	if got := testutil.ToFloat64(m.Upstream); got != 0 {
		t.Errorf("upstream active = %v after it went, want 0", got)
	}
	var none *Metrics // a controller built without metrics records nothing
	none.observeEviction(now, now)
	none.setHeld(1)
	none.observeRefusal("RateLimited")
	none.setUpstream(true)
}
