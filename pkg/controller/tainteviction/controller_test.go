package tainteviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// env is taint-eviction on the controller fixture (ctrltest), with the
// Events of its syncs kept until the test takes them.
type env struct {
	*ctrltest.Fixture
	t      *testing.T
	c      *Controller
	synced []string // Events of the syncs, not taken yet
}

func newEnv(t *testing.T, now time.Time, guard GuardConfig, objs ...runtime.Object) *env {
	t.Helper()
	f := ctrltest.New(t, now, objs...)
	c, err := New(Config{Informers: f.Informers, Actuator: f.Actuator, Client: f.Kube, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	c.now = f.Clock.Now
	c.seen.now = c.now
	f.Start()
	return &env{Fixture: f, t: t, c: c}
}

// sync runs one sync of the node once the caches show the API's objects
// (ctrltest.Fixture.Sync); a write the re-check abandoned is no failure.
func (e *env) sync(node string) time.Duration {
	e.t.Helper()
	e.synced = append(e.synced, e.Events()...) // Sync drops earlier ones
	r := e.Sync(e.c.sync, node)
	if r.Err != nil && !actuator.IsDecisionChanged(r.Err) {
		e.t.Fatalf("sync %s: %v", node, r.Err)
	}
	e.synced = append(e.synced, r.Events...)
	return r.After
}

func (e *env) pod(name string) *v1.Pod {
	e.t.Helper()
	p, err := e.Kube.CoreV1().Pods("ns").Get(e.Ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) updateNode(n *v1.Node) {
	e.t.Helper()
	cur, err := e.Kube.CoreV1().Nodes().Get(e.Ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n.ResourceVersion = cur.ResourceVersion
	if _, err := e.Kube.CoreV1().Nodes().Update(e.Ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// events returns the Events recorded since the last call.
func (e *env) events() []string {
	out := append(e.synced, e.Events()...)
	e.synced = nil
	return out
}

func hasEvent(events []string, parts ...string) bool {
	for _, ev := range events {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(ev, p)
		}
		if all {
			return true
		}
	}
	return false
}

func tolerateFor(key string, secs int64) testobj.PodOption {
	return testobj.Toleration(v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &secs})
}

// statefulObjs are a pod on node n1 with an RWO CSI volume, its claim,
// volume and driver.
func statefulObjs(t0 time.Time, opts ...testobj.PodOption) []runtime.Object {
	pod := testobj.Pod("ns", "db-0", append([]testobj.PodOption{testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour)), testobj.Claim("data", "data-db-0")}, opts...)...)
	return []runtime.Object{pod, testobj.PVC("ns", "data-db-0", "pv-1"), testobj.CSIPV("pv-1", "csi.example", "h1", v1.ReadWriteOnce), testobj.CSIDriver("csi.example", nil)}
}

func TestSyncEvictsAsUpstreamOnALiveNode(t *testing.T) {
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour)))
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), node, pod)
	e.sync("n1")
	if e.pod("web") != nil {
		t.Fatal("untolerated NoExecute taint on a Ready node: pod not deleted")
	}
	// The condition is written before the delete: find it in the actions.
	var cond *v1.PodCondition
	for _, a := range e.Kube.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			p := a.(interface{ GetObject() runtime.Object }).GetObject().(*v1.Pod)
			for i := range p.Status.Conditions {
				if p.Status.Conditions[i].Type == v1.DisruptionTarget {
					cond = &p.Status.Conditions[i]
				}
			}
		}
	}
	if cond == nil || cond.Reason != "DeletionByTaintManager" || cond.Status != v1.ConditionTrue {
		t.Fatalf("DisruptionTarget condition = %+v, want True DeletionByTaintManager", cond)
	}
	if ev := e.events(); !hasEvent(ev, "TaintManagerEviction", "Marking for deletion Pod ns/web") {
		t.Errorf("events %q lack upstream's TaintManagerEviction", ev)
	}
}

func TestSyncClockStartsAtTimeAdded(t *testing.T) {
	// A controller that starts (or takes over) 30 s into a 60 s
	// toleration evicts 30 s later (31: timeAdded has a second's
	// resolution, and a pod never gets less than its toleration), not 60.
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour)), tolerateFor("example.com/maintenance", 60))
	e := newEnv(t, t0.Add(30*time.Second), DefaultGuard(), node, pod)
	after := e.sync("n1")
	if after < 30*time.Second || after > 32*time.Second {
		t.Fatalf("requeue after %s, want about 31s (the end of timeAdded's second + 60s)", after)
	}
	if e.pod("web") == nil {
		t.Fatal("evicted before its toleration ran out")
	}
	e.Clock.SetTime(t0.Add(60 * time.Second))
	e.sync("n1")
	if e.pod("web") == nil {
		t.Fatal("evicted before the end of timeAdded's second + tolerationSeconds")
	}
	e.Clock.SetTime(t0.Add(61 * time.Second))
	e.sync("n1")
	if e.pod("web") != nil {
		t.Fatal("not evicted at the end of timeAdded's second + tolerationSeconds")
	}
}

func TestSyncHoldsStatefulPodUntilFenced(t *testing.T) {
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.UnknownSince(t0), testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, t0))
	objs := append(statefulObjs(t0), node, testobj.Node("n2", testobj.ReadySince(t0)), testobj.Node("n3", testobj.ReadySince(t0)))
	e := newEnv(t, t0.Add(time.Minute), DefaultGuard(), objs...)
	e.sync("n1")
	if got := e.pod("db-0"); got == nil || got.DeletionTimestamp != nil {
		t.Fatal("stateful pod of a dead node that is not cut off was deleted")
	}
	if ev := e.events(); !hasEvent(ev, EventHeld, "not known cut off") {
		t.Errorf("events %q lack the hold", ev)
	}
	fenced := node.DeepCopy()
	fenced.Status.Conditions = append(fenced.Status.Conditions, v1.NodeCondition{Type: names.FencingCompleteCondition, Status: v1.ConditionTrue})
	e.updateNode(fenced)
	e.sync("n1")
	if e.pod("db-0") != nil {
		t.Fatal("stateful pod of a fenced node not force-deleted")
	}
	if ev := e.events(); !hasEvent(ev, actuator.EventForceDeleted, "fenced") {
		t.Errorf("events %q lack the force deletion and its reason", ev)
	}
}

func TestSyncReturningKubeletCancelsForceDelete(t *testing.T) {
	// The cache still shows the node dead and fenced; the API server has
	// it Ready again: the write-time re-check must refuse the force delete.
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.UnknownSince(t0), testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, t0),
		testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))
	objs := append(statefulObjs(t0), node, testobj.Node("n2", testobj.ReadySince(t0)))
	e := newEnv(t, t0.Add(time.Minute), DefaultGuard(), objs...)
	e.Settle()
	back := node.DeepCopy()
	back.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	back.Spec.Taints = nil
	// Decide on the node as cached before the update, then write: the
	// re-check reads the API server, not the decision's input.
	cachedNode, err := e.c.nodes.Get("n1")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := e.Kube.CoreV1().Nodes().Get(e.Ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	back.ResourceVersion = cur.ResourceVersion
	if _, err := e.Kube.CoreV1().Nodes().Update(e.Ctx, back, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, _ := e.c.pods.ByIndex("spec.nodeName", "n1")
	if len(pods) != 1 {
		t.Fatalf("cached pods on n1: %d", len(pods))
	}
	in, safe, err := e.c.input(cachedNode, pods[0].(*v1.Pod), e.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := DecidePod(in)
	if d.Action != ActionForceDelete {
		t.Fatalf("cached decision %+v, want ForceDelete", d)
	}
	err = e.c.evictOne(e.Ctx, due{in: in, d: d, safe: safe})
	if !actuator.IsDecisionChanged(err) {
		t.Fatalf("evictOne = %v, want a decision changed on fresh data", err)
	}
	if e.pod("db-0") == nil {
		t.Fatal("pod deleted although its kubelet is back")
	}
}

func TestSyncCancelsWhenTaintGoes(t *testing.T) {
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour)), tolerateFor("example.com/maintenance", 600))
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), node, pod)
	if after := e.sync("n1"); after <= 0 {
		t.Fatal("no requeue for a scheduled eviction")
	}
	untainted := node.DeepCopy()
	untainted.Spec.Taints = nil
	e.updateNode(untainted)
	e.sync("n1")
	if ev := e.events(); !hasEvent(ev, "TaintManagerEviction", "Cancelling deletion of Pod ns/web") {
		t.Errorf("events %q lack upstream's cancellation", ev)
	}
	if e.pod("web") == nil {
		t.Fatal("pod deleted after its taint went")
	}
}

func TestSyncStormGuard(t *testing.T) {
	// Two of four nodes of a zone die together (below the unhealthy-zone
	// threshold): the first node's pods go, the second waits for a token.
	t0 := testobj.Epoch
	zone := testobj.Label(v1.LabelTopologyZone, "z1")
	dead := func(name string) *v1.Node {
		return testobj.Node(name, zone, testobj.UnknownSince(t0), testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, t0))
	}
	objs := []runtime.Object{dead("n1"), dead("n2"), testobj.Node("n3", zone, testobj.ReadySince(t0)), testobj.Node("n4", zone, testobj.ReadySince(t0)),
		testobj.Pod("ns", "a", testobj.OnNode("n1"), testobj.ScheduledAt(t0)), testobj.Pod("ns", "b", testobj.OnNode("n2"), testobj.ScheduledAt(t0))}
	g := DefaultGuard()
	g.Rate = 0.1
	e := newEnv(t, t0.Add(time.Second), g, objs...)
	e.sync("n1")
	after := e.sync("n2")
	if a, b := e.pod("a"), e.pod("b"); a != nil || b == nil {
		t.Fatalf("after one token: pod a gone=%v, pod b gone=%v; want only a", a == nil, b == nil)
	}
	if after < 9*time.Second || after > 11*time.Second {
		t.Errorf("refused node requeued after %s, want the next token (10s)", after)
	}
	if ev := e.events(); !hasEvent(ev, EventStormGuard, stormguard.ReasonRateLimited) {
		t.Errorf("events %q lack the refusal", ev)
	}
	e.Clock.Step(10 * time.Second)
	e.sync("n2")
	if e.pod("b") != nil {
		t.Fatal("second node's pod not evicted once a token refilled")
	}
}

func TestSyncFullDisruptionEvictsNothing(t *testing.T) {
	t0 := testobj.Epoch
	dead := func(name string) *v1.Node {
		return testobj.Node(name, testobj.UnknownSince(t0), testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, t0))
	}
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), dead("n1"), dead("n2"), testobj.Pod("ns", "a", testobj.OnNode("n1"), testobj.ScheduledAt(t0)))
	e.sync("n1")
	if e.pod("a") == nil {
		t.Fatal("evicted while every node is down")
	}
	if ev := e.events(); !hasEvent(ev, EventStormGuard, stormguard.ReasonAllZonesFullyDisrupted) {
		t.Errorf("events %q lack the refusal", ev)
	}
}

func TestSyncStandsDownWhileUpstreamRuns(t *testing.T) {
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "web", testobj.OnNode("n1"), testobj.ScheduledAt(t0))
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), node, pod)
	upstream := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "ns", Name: "web.1"},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "other"},
		Reason:         "TaintManagerEviction", Message: "Marking for deletion Pod ns/other",
		Source:        v1.EventSource{Component: UpstreamController},
		LastTimestamp: metav1.NewTime(e.Clock.Now()),
	}
	e.c.upstream.observe(klog.Background(), upstream)
	after := e.sync("n1")
	if e.pod("web") == nil {
		t.Fatal("evicted while upstream's controller runs too")
	}
	if after < UpstreamWindow-time.Second || after > UpstreamWindow+time.Second {
		t.Errorf("requeue after %s, want the end of the stand-down (%s)", after, UpstreamWindow)
	}
	if ev := e.events(); !hasEvent(ev, EventUpstreamActive) || !hasEvent(ev, EventHeld, "running as well") {
		t.Errorf("events %q lack the warning or the hold", ev)
	}
	e.Clock.Step(UpstreamWindow + time.Second)
	e.sync("n1")
	if e.pod("web") != nil {
		t.Fatal("not evicted after the stand-down ended")
	}
	// An old Event (before the window) is no evidence.
	old := upstream.DeepCopy()
	old.LastTimestamp = metav1.NewTime(e.Clock.Now().Add(-2 * UpstreamWindow))
	e.c.upstream.observe(klog.Background(), old)
	if _, active := e.c.upstream.Active(e.Clock.Now()); active {
		t.Error("an Event older than the window counts as upstream running")
	}
}

func TestSyncEvictWhenHook(t *testing.T) {
	// The pod asks for its operator's checkpoint before it is evicted from
	// a live node: held until the condition is True, then evicted, and a
	// change of the condition alone enqueues the node.
	t0 := testobj.Epoch
	node := testobj.Node("n1", testobj.ReadySince(t0), testobj.TaintAt("example.com/maintenance", v1.TaintEffectNoExecute, t0))
	pod := testobj.Pod("ns", "db", testobj.OnNode("n1"), testobj.ScheduledAt(t0.Add(-time.Hour)),
		testobj.PodAnnotation(EvictWhenAnnotation, "example.com/Checkpointed"))
	e := newEnv(t, t0.Add(time.Second), DefaultGuard(), node, pod)
	e.sync("n1")
	if e.pod("db") == nil {
		t.Fatal("evicted before its evict-when condition is True")
	}
	if ev := e.events(); !hasEvent(ev, EventHeld, "example.com/Checkpointed") {
		t.Errorf("events %q lack the hold naming the condition", ev)
	}
	checkpointed := e.pod("db").DeepCopy()
	checkpointed.Status.Conditions = append(checkpointed.Status.Conditions, v1.PodCondition{Type: "example.com/Checkpointed", Status: v1.ConditionTrue})
	if !podChanged(e.pod("db"), checkpointed) {
		t.Error("the hook's condition turning True does not enqueue the node")
	}
	if _, err := e.Kube.CoreV1().Pods("ns").UpdateStatus(e.Ctx, checkpointed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sync("n1") // on caches that show the condition
	if e.pod("db") != nil {
		t.Fatal("not evicted once its evict-when condition is True")
	}
}

// A fenced node whose Ready condition is still the stale one from before
// the fence, with the out-of-service taint: its stateful pod is
// force-deleted at once, not evicted gracefully, and the fence intent
// node-fencing recorded on its VolumeAttachment stands: no intent write
// before the deletion. The same node Ready again after the fence gets a
// graceful eviction.
func TestSyncFencedNodeWithStaleReady(t *testing.T) {
	for _, tc := range []struct {
		name        string
		readySince  time.Duration // after t0; the fence is at t0+1m
		wantDeleted bool
	}{
		{"Ready from before the fence: force-deleted", 0, true},
		{"Ready again since the fence: evicted gracefully", 2 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := testobj.Epoch
			fencedAt := t0.Add(time.Minute)
			node := testobj.Node("n1", testobj.ReadySince(t0.Add(tc.readySince)),
				testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, fencedAt),
				testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, fencedAt))
			va := testobj.VA(nodeutil.CSIAttachmentName("csi.example", "h1", "n1"), "csi.example", "pv-1", "n1",
				testobj.VAAnnotation(names.FenceIntentAnnotation, cutoff.NewRecord(cutoff.ReasonFenced, "", "controller/node-fencing", fencedAt).Encode()))
			objs := append(statefulObjs(t0), node, va, testobj.Node("n2", testobj.ReadySince(t0)), testobj.Node("n3", testobj.ReadySince(t0)))
			e := newEnv(t, t0.Add(3*time.Minute), DefaultGuard(), objs...)
			patches := 0
			e.Kube.PrependReactor("patch", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
				patches++
				return false, nil, nil
			})
			e.sync("n1")
			if tc.wantDeleted {
				if got := e.pod("db-0"); got != nil {
					t.Fatalf("stateful pod of a fenced node still there: %+v", got.Status)
				}
				if ev := e.events(); !hasEvent(ev, actuator.EventForceDeleted, "power was read back Off") {
					t.Errorf("events %q lack the force deletion and its reason", ev)
				}
				if patches != 0 {
					t.Errorf("%d intent writes on a VolumeAttachment whose intent was recorded already", patches)
				}
				return
			}
			ev := e.events()
			if !hasEvent(ev, actuator.EventTaintManagerEviction) || hasEvent(ev, actuator.EventForceDeleted) {
				t.Errorf("pod of a node Ready again: events %q, want a graceful eviction and no force deletion", ev)
			}
		})
	}
}
