package metrics

import (
	"strings"
	"testing"
	"time"

	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

type fakeState struct {
	pending []PendingDetach
	caps    map[string]bool
	blind   bool
	waits   map[string]time.Duration
}

func (f fakeState) PendingDetaches() []PendingDetach   { return f.pending }
func (f fakeState) FenceCapabilities() map[string]bool { return f.caps }
func (f fakeState) Blind() bool                        { return f.blind }
func (f fakeState) QueueWaits() map[string]time.Duration {
	return f.waits
}

func TestStateGauges(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	registry := k8smetrics.NewKubeRegistry()
	registry.CustomMustRegister(&stateCollector{now: func() time.Time { return now }, state: fakeState{
		pending: []PendingDetach{
			{Mode: "fenced", Reason: "out-of-service", Since: now.Add(-30 * time.Second)},
			{Mode: "fenced", Reason: "out-of-service", Since: now.Add(-90 * time.Second)},
			{Mode: "refused", Reason: "safe-detach", Since: now.Add(-10 * time.Second)},
			{Mode: "plain", Since: now.Add(-2 * time.Second)},
		},
		caps:  map[string]bool{"UNPUBLISH_FENCE": true, "FORCE_UNPUBLISH": false},
		blind: true,
		waits: map[string]time.Duration{"csi-attacher-va": 95 * time.Second, "csi-attacher-va-failover": 0},
	}})
	want := `
# HELP fenceline_attacher_blind [ALPHA] 1 when RBAC does not let the attacher read Nodes or CSIDrivers, so that it detaches as the upstream attacher does and never fences; 0 otherwise.
# TYPE fenceline_attacher_blind gauge
fenceline_attacher_blind 1
# HELP fenceline_attacher_driver_fence_capability [ALPHA] 1 when the CSI driver advertised the fence capability at start-up, 0 otherwise.
# TYPE fenceline_attacher_driver_fence_capability gauge
fenceline_attacher_driver_fence_capability{capability="FORCE_UNPUBLISH"} 0
fenceline_attacher_driver_fence_capability{capability="UNPUBLISH_FENCE"} 1
# HELP fenceline_attacher_oldest_pending_detach_seconds [ALPHA] Age of the oldest VolumeAttachment being deleted and not yet detached (since its deletionTimestamp), by mode and fence reason.
# TYPE fenceline_attacher_oldest_pending_detach_seconds gauge
fenceline_attacher_oldest_pending_detach_seconds{mode="fenced",reason="out-of-service"} 90
fenceline_attacher_oldest_pending_detach_seconds{mode="plain",reason="none"} 2
fenceline_attacher_oldest_pending_detach_seconds{mode="refused",reason="safe-detach"} 10
# HELP fenceline_attacher_queue_oldest_wait_seconds [ALPHA] How long the item that has waited longest for a worker in each queue has waited; 0 when none waits. Queue depths are workqueue_depth{name}.
# TYPE fenceline_attacher_queue_oldest_wait_seconds gauge
fenceline_attacher_queue_oldest_wait_seconds{queue="csi-attacher-va"} 95
fenceline_attacher_queue_oldest_wait_seconds{queue="csi-attacher-va-failover"} 0
# HELP fenceline_attacher_pending_detaches [ALPHA] VolumeAttachments being deleted and not yet detached, by mode and fence reason.
# TYPE fenceline_attacher_pending_detaches gauge
fenceline_attacher_pending_detaches{mode="fenced",reason="out-of-service"} 2
fenceline_attacher_pending_detaches{mode="plain",reason="none"} 1
fenceline_attacher_pending_detaches{mode="refused",reason="safe-detach"} 1
`
	if err := testutil.GatherAndCompare(registry, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
