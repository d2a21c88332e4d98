package nodefencing

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// lieCaught is a node that carries the lying-fence condition True.
var lieCaught = testobj.Condition(names.LyingFenceCondition, v1.ConditionTrue)

// signs are LifeSigns observed since the mark.
func signs(renewals, ready int) LifeSigns {
	return LifeSigns{Watching: true, LeaseRenewals: renewals, ReadyReports: ready}
}

func TestJudgeFence(t *testing.T) {
	fenced := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced), testobj.BootIDAtFence("boot-1"))
	up := testobj.ReadySince(testobj.Epoch.Add(-time.Hour))
	same, other := testobj.Node("n1", up, testobj.BootID("boot-1")), testobj.Node("n1", up, testobj.BootID("boot-2"))
	noBoot := testobj.Node("n1", up, testobj.BootID(""))
	for _, tc := range []struct {
		name         string
		r            *fencingv1alpha1.FencingRequest
		node         *v1.Node
		s            LifeSigns
		alive, lying bool
	}{
		{"no observation since the fence: a Ready read from before proves nothing", fenced, same, LifeSigns{}, false, false},
		{"watching, nothing seen", fenced, same, signs(0, 0), false, false},
		{"one renewal and one Ready report: each may have been in flight", fenced, same, signs(1, 1), false, false},
		{"two renewals, fenced boot ID: lying", fenced, same, signs(2, 0), true, true},
		{"two Ready reports, fenced boot ID: lying", fenced, same, signs(0, 2), true, true},
		{"renewing with a new boot ID: rebooted, not lying", fenced, other, signs(5, 2), true, false},
		{"renewing, boot ID now unknown: alive, cannot tell", fenced, noBoot, signs(5, 0), true, false},
		{"renewing, boot ID at fence unknown: alive, cannot tell", testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced)), same, signs(5, 0), true, false},
		{"request Recovering: not judged", testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseRecovering), testobj.BootIDAtFence("boot-1")), same, signs(5, 5), false, false},
		{"request Fencing: not judged", testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFencing), testobj.BootIDAtFence("boot-1")), same, signs(5, 5), false, false},
		{"no request", nil, same, signs(5, 5), false, false},
		{"no node", fenced, nil, signs(5, 5), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := JudgeFence(tc.r, tc.node, tc.s)
			if v.Alive != tc.alive || v.Lying != tc.lying || v.Why == "" {
				t.Fatalf("JudgeFence = %+v; want alive %v, lying %v, with a why", v, tc.alive, tc.lying)
			}
			if v.Lying && (!strings.Contains(v.Why, "boot-1") || !strings.Contains(v.Why, "nothing is unfenced")) {
				t.Errorf("why %q does not name the boot ID and what stays", v.Why)
			}
		})
	}
}

func TestLieCondition(t *testing.T) {
	fenced := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced), testobj.BootIDAtFence("boot-1"))
	up := testobj.ReadySince(testobj.Epoch.Add(-time.Hour))
	node := func(opts ...testobj.NodeOption) *v1.Node {
		return testobj.Node("n1", append([]testobj.NodeOption{up, testobj.BootID("boot-1")}, opts...)...)
	}
	cleared := testobj.Condition(names.LyingFenceCondition, v1.ConditionFalse)
	for _, tc := range []struct {
		name      string
		in        Input
		write     bool
		status    v1.ConditionStatus
		wantReson string
	}{
		{"lying: set True", Input{Node: node(), Request: fenced, Signs: signs(2, 0)}, true, v1.ConditionTrue, ReasonLyingFence},
		{"lying, already True: the same condition (the caller skips the write)", Input{Node: node(lieCaught), Request: fenced, Signs: signs(3, 0)}, true, v1.ConditionTrue, ReasonLyingFence},
		{"not lying, never caught: no condition at all", Input{Node: node(), Request: fenced}, false, "", ""},
		{"caught before, no observations (restart), same boot: kept as it is", Input{Node: node(lieCaught), Request: fenced}, false, "", ""},
		{"caught before, rebooted: False", Input{Node: node(lieCaught, testobj.BootID("boot-2")), Request: fenced}, true, v1.ConditionFalse, "NewBootID"},
		{"caught before, request no longer Fenced: False", Input{Node: node(lieCaught), Request: testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseRecovering), testobj.BootIDAtFence("boot-1"))}, true, v1.ConditionFalse, "NotFenced"},
		{"caught before, request gone: False", Input{Node: node(lieCaught)}, true, v1.ConditionFalse, "NotFenced"},
		{"cleared before, no request: nothing", Input{Node: node(cleared)}, false, "", ""},
		{"a node recreated under the name: nothing", Input{Node: node(lieCaught, testobj.NodeUID("other")), Request: fenced}, false, "", ""},
		{"no node: nothing", Input{Request: fenced, Signs: signs(5, 5)}, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, write := LieCondition(tc.in)
			if write != tc.write || (write && (c.Status != tc.status || c.Reason != tc.wantReson || string(c.Type) != names.LyingFenceCondition || c.Message == "")) {
				t.Fatalf("LieCondition = %+v, %v; want write %v, %s/%s", c, write, tc.write, tc.status, tc.wantReson)
			}
		})
	}
}

// TestLifeWatch: renewals and Ready reports count from the mark, by change
// only; a resync, a renewal seen before the mark and a Ready read left
// from before the fence count nothing; a new request starts over.
func TestLifeWatch(t *testing.T) {
	var enqueued []string
	w := newLifeWatch(func(n string) { enqueued = append(enqueued, n) })
	t0 := testobj.Epoch
	// The node's clock runs an hour behind: only changes count.
	lease := func(renew time.Time) *coordinationv1.Lease { return testobj.Lease("n1", renew.Add(-time.Hour)) }
	readyAt := func(hb time.Time) *v1.Node {
		n := testobj.Node("n1", testobj.ReadySince(t0.Add(-time.Hour)), testobj.BootID("boot-1"))
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(hb)
		return n
	}
	fenced := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced), testobj.BootIDAtFence("boot-1"))

	w.leaseSeen(lease(t0)) // before any mark: not watched
	if s := w.signs("n1", fenced, lease(t0), readyAt(t0)); s != signs(0, 0) {
		t.Fatalf("at the mark: %+v", s)
	}
	w.leaseSeen(lease(t0))  // a resync
	w.nodeSeen(readyAt(t0)) // the Ready read from before the fence
	w.leaseSeen(lease(t0.Add(10 * time.Second)))
	w.nodeSeen(readyAt(t0.Add(10 * time.Second)))
	w.leaseSeen(lease(t0.Add(10 * time.Second))) // seen again
	w.leaseSeen(lease(t0.Add(20 * time.Second)))
	if s := w.signs("n1", fenced, nil, nil); s != signs(2, 1) {
		t.Fatalf("after two renewals and one Ready report: %+v", s)
	}
	if len(enqueued) != 3 {
		t.Errorf("enqueued %v, want the node once per sign", enqueued)
	}
	if v := JudgeFence(fenced, readyAt(t0), w.signs("n1", fenced, nil, nil)); !v.Lying {
		t.Errorf("JudgeFence on the watch's signs = %+v, want lying", v)
	}
	// The request ends, then a new one is fenced: counted afresh.
	if s := w.signs("n1", testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseRecovering)), nil, nil); s != (LifeSigns{}) {
		t.Fatalf("a request not Fenced has signs %+v", s)
	}
	next := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFenced), testobj.BootIDAtFence("boot-1"))
	next.UID = "uid-req-n1-next"
	if s := w.signs("n1", next, lease(t0.Add(20*time.Second)), readyAt(t0)); s != signs(0, 0) {
		t.Fatalf("a new request starts from %+v, want nothing", s)
	}
	w.leaseSeen(testobj.Lease("n2", t0)) // another node: not watched
	if len(enqueued) != 3 {
		t.Errorf("an unwatched node was enqueued: %v", enqueued)
	}
}

// TestSyncFenceWithStaleReadyWarnsNothing: a node fenced while its Ready
// condition still reads True (the node lifecycle controller has not marked
// it yet) is down, not "Ready with the boot ID it had when fenced": no
// Warning, no lying-fence condition.
func TestSyncFenceWithStaleReadyWarnsNothing(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, clusterStaleReady(now)...)
	e.fenceToFenced()
	e.takeEvents()
	e.requestEvents()
	for range 2 {
		e.sync("n1")
	}
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonNodeDown)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionTrue, names.LyingFenceCondition: ""},
		names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	for _, ev := range append(e.takeEvents(), e.requestEvents()...) {
		if strings.HasPrefix(ev, v1.EventTypeWarning) {
			t.Errorf("a Warning after a normal fence: %s", ev)
		}
	}
	if got := testutil.ToFloat64(e.Metrics.LyingFencesCaught); got != 0 {
		t.Errorf("lying fences caught = %v, want 0", got)
	}
}

// TestSyncLyingFenceReported: a fenced node whose Lease keeps renewing
// with the fenced boot ID gets the condition, one Warning on the Node and
// on the request, the metric; its fence, taints and phase stay. Once it
// reboots the condition turns False and the gauge goes.
func TestSyncLyingFenceReported(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, clusterStaleReady(now)...)
	e.fenceToFenced()
	e.takeEvents()
	e.requestEvents()
	for i := range 2 {
		e.Clock.Step(10 * time.Second)
		e.renewLease("n1")
		e.sync("n1")
		if i == 0 {
			e.wantNode("n1", map[string]v1.ConditionStatus{names.LyingFenceCondition: ""}, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
		}
	}
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonLyingFence)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionTrue, names.LyingFenceCondition: v1.ConditionTrue},
		names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	for what, events := range map[string][]string{"Node": e.takeEvents(), "FencingRequest": e.requestEvents()} {
		warnings := 0
		for _, ev := range events {
			if strings.HasPrefix(ev, v1.EventTypeWarning+" "+EventLyingFence) {
				warnings++
			}
		}
		if warnings != 1 {
			t.Errorf("%d LyingFence Warnings on the %s, want 1", warnings, what)
		}
	}
	if got := testutil.ToFloat64(e.Metrics.LyingFence.WithLabelValues("n1")); got != 1 {
		t.Errorf("lying_fence{node=n1} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.Metrics.LyingFencesCaught); got != 1 {
		t.Errorf("lying fences caught = %v, want 1", got)
	}

	e.comesBack("boot-2")
	e.sync("n1")
	e.wantNode("n1", map[string]v1.ConditionStatus{names.LyingFenceCondition: v1.ConditionFalse}, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	if got := testutil.CollectAndCount(e.Metrics.LyingFence); got != 0 {
		t.Errorf("%d lying_fence series after the reboot, want none", got)
	}
}

// clusterStaleReady is cluster with n1's Lease stale and its Ready
// condition still True, as before the node lifecycle controller marks it.
func clusterStaleReady(now time.Time) []runtime.Object {
	objs := cluster(now, nil)
	for i, o := range objs {
		if n, ok := o.(*v1.Node); ok && n.Name == "n1" {
			objs[i] = testobj.Node("n1", testobj.ReadySince(now.Add(-time.Hour)))
		}
	}
	return objs
}
