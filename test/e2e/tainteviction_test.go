package e2e

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/tainteviction"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// drainTaint is the test's own NoExecute taint (a maintenance taint an
// operator would put on a Ready node).
const drainTaint = "example.com/drain"

// deletions records, for every pod of a namespace, when the test first saw
// it being deleted (deletionTimestamp set, or gone) and the pod as it was
// then.
type deletions struct {
	mu  sync.Mutex
	at  map[string]time.Time
	pod map[string]*corev1.Pod
}

func watchDeletions(t *testing.T, cs kubernetes.Interface, ns string) *deletions {
	t.Helper()
	d := &deletions{at: map[string]time.Time{}, pod: map[string]*corev1.Pod{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	seen := func(obj any, gone bool) {
		p, ok := obj.(*corev1.Pod)
		if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
			p, ok = t.Obj.(*corev1.Pod)
		}
		if !ok || (!gone && p.DeletionTimestamp == nil) {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, done := d.at[p.Name]; !done {
			d.at[p.Name], d.pod[p.Name] = time.Now(), p.DeepCopy()
		}
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj, false) },
		UpdateFunc: func(_, obj any) { seen(obj, false) },
		DeleteFunc: func(obj any) { seen(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return d
}

// when returns when the pod was first seen deleted (zero: not yet).
func (d *deletions) when(name string) (time.Time, *corev1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[name], d.pod[name]
}

// wait waits until every named pod was seen deleted.
func (d *deletions) wait(ctx context.Context, timeout time.Duration, names ...string) error {
	return world.WaitFor(ctx, timeout, "pods "+strings.Join(names, ", ")+" deleted", func(context.Context) (bool, error) {
		for _, n := range names {
			if at, _ := d.when(n); at.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
}

// evictionWorld is a world for a taint-eviction scenario with its own
// namespace ns and a watch of the deletions there.
type evictionWorld struct {
	ctx context.Context
	w   *world.World
	del *deletions
}

const evictionNS = "evict"

func startEvictionWorld(t *testing.T, opts world.Options) evictionWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	w := world.Start(t, opts)
	must(t, w.CreateNamespace(ctx, evictionNS))
	must(t, w.ControllerRunning(ctx, startTimeout))
	return evictionWorld{ctx: ctx, w: w, del: watchDeletions(t, w.Cluster.Client(), evictionNS)}
}

// plainPod is a pod without volumes bound to node, with extra tolerations.
func plainPod(ns, name, node string, tolerations ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "plain"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.example/app:1"}},
			Tolerations:                   tolerations,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
}

func tolerate(key string, seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

// startPods creates the pods and waits until each is Running.
func startPods(t *testing.T, ctx context.Context, w *world.World, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		_, err := w.Cluster.Client().CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		must(t, err)
	}
	for _, p := range pods {
		_, err := w.WaitRunning(ctx, p.Namespace, p.Name, "", startTimeout)
		must(t, err)
	}
}

// taintNode adds a NoExecute taint with timeAdded now and returns when.
func taintNode(t *testing.T, ctx context.Context, w *world.World, node, key string) time.Time {
	t.Helper()
	at := time.Now()
	taintNodeAddedAt(t, ctx, w, node, key, at)
	return at
}

// TestTaintEvictionRestartMidToleration: fenceline-controller is SIGKILLed
// and restarted 30 s into a pod's 60 s toleration. The pod is evicted 60 s
// after the taint was added, not 90 s (upstream's timers restart with the
// controller), gracefully, with upstream's DisruptionTarget reason.
func TestTaintEvictionRestartMidToleration(t *testing.T) {
	t.Parallel()
	e := startEvictionWorld(t, world.Options{TaintEviction: true})
	ctx, w, del, ns := e.ctx, e.w, e.del, evictionNS
	startPods(t, ctx, w, plainPod(ns, "web", w.Nodes[0], tolerate(drainTaint, ptr.To[int64](60))))

	t0 := taintNode(t, ctx, w, w.Nodes[0], drainTaint)
	// The scenario's own clock: the restart happens 30 s into the
	// toleration, whatever the controller is doing then.
	select {
	case <-time.After(time.Until(t0.Add(30 * time.Second))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if at, _ := del.when("web"); !at.IsZero() {
		t.Fatalf("pod evicted %.1f s after the taint, before its 60 s toleration ran out", at.Sub(t0).Seconds())
	}
	must(t, w.KillController(ctx))
	must(t, del.wait(ctx, 60*time.Second, "web"))
	at, pod := del.when("web")
	// timeAdded has a second's resolution: the restarted controller counts
	// from the end of that second (never early, up to a second late), and
	// needs a moment after its restart.
	if got := at.Sub(t0); got < 59500*time.Millisecond || got > 70*time.Second {
		t.Fatalf("pod evicted %.1f s after the taint, want about 60 s (upstream's restarted timer would give 90 s)", got.Seconds())
	}
	if c := disruption(pod); c == nil || c.Reason != actuator.TaintEvictionDisruptionReason {
		t.Fatalf("evicted pod's DisruptionTarget = %+v, want reason %s", c, actuator.TaintEvictionDisruptionReason)
	}
	t.Logf("pod evicted %.1f s after the taint; controller restarted at 30 s", at.Sub(t0).Seconds())
}

func disruption(p *corev1.Pod) *corev1.PodCondition {
	if p == nil {
		return nil
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestTaintEvictionHoldsStatefulPodUntilFenced: a node running a database
// hangs (heartbeats stop, writes go on). Its pod tolerates the unreachable
// taint for 2 s; upstream would graceful-delete it then into an endless
// Terminating. Fenceline's taint-eviction holds it (and says so) until
// node-fencing has the node powered off and FencingComplete, then
// force-deletes it; the replacement runs elsewhere, the old node's writes
// fenced.
func TestTaintEvictionHoldsStatefulPodUntilFenced(t *testing.T) {
	t.Parallel()
	// Detection slower than the lifecycle controller's NoExecute taint plus
	// the pod's 2 s toleration, so that the eviction falls due before the
	// node is fenced.
	s := newFencingScenarioWith(t, world.Options{Fencing: true, TaintEviction: true}, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.Detection.LeaseStaleAfter = &metav1.Duration{Duration: 20 * time.Second}
	})
	del := watchDeletions(t, s.w.Cluster.Client(), s.ns)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	s.hang(nodeA)
	held := waitEvent(t, s.ctx, s.w.Cluster.Client(), s.ns, "db-0", tainteviction.EventHeld, nodeLostTimeout+30*time.Second)
	s.timeline.Add(time.Now(), "held: %s", held.Message)
	if at, _ := del.when("db-0"); !at.IsZero() {
		t.Fatalf("db-0 deleted %.1f s after the hang, before its node was fenced", at.Sub(s.t0).Seconds())
	}
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	seenFenced := time.Now()
	s.timeline.Add(seenFenced, "FencingRequest %s seen Fenced", req.Name)
	must(t, del.wait(s.ctx, failoverTimeout, "db-0"))
	deletedAt, gone := del.when("db-0")
	node, err := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{})
	must(t, err)
	fencedAt := conditionSince(node, names.FencingCompleteCondition)
	// API times have a second's resolution; the test's own clock saw the
	// deletion.
	if fencedAt.IsZero() || deletedAt.Before(fencedAt.Add(-time.Second)) {
		t.Fatalf("db-0 deleted at %s, FencingComplete since %s: deleted before the fence", deletedAt.Format(time.RFC3339Nano), fencedAt)
	}
	if c := disruption(gone); c == nil || c.Reason != actuator.DisruptionReason {
		t.Fatalf("db-0's DisruptionTarget = %+v, want a force deletion (%s), not a graceful one", c, actuator.DisruptionReason)
	}
	s.assertMovedFenced(nodeA, seenFenced)
	t.Logf("db-0 held %.1f s after the hang, force-deleted %.1f s after (FencingComplete at %s)", held.LastTimestamp.Sub(s.t0).Seconds(), deletedAt.Sub(s.t0).Seconds(), fencedAt.Format(time.RFC3339))
}

func conditionSince(n *corev1.Node, typ string) time.Time {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// waitEvent waits for an Event with reason on the named object of ns.
func waitEvent(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, reason string, timeout time.Duration) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", name), fields.OneTermEqualSelector("reason", reason)).String()
	err := world.WaitFor(ctx, timeout, "Event "+reason+" on "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		found = &evs.Items[0]
		return true, nil
	})
	must(t, err)
	return found
}

// TestTaintEvictionStormIsRateLimited: half the nodes of a zone go down
// together, and kube-controller-manager (run here with a high
// --node-eviction-rate) taints them all at once. Fenceline's taint-eviction
// starts the evictions of one node per 1/rate seconds, and says so.
func TestTaintEvictionStormIsRateLimited(t *testing.T) {
	t.Parallel()
	const rate = 0.2 // one node per 5 s
	e := startEvictionWorld(t, world.Options{
		Nodes:          []string{"node-a", "node-b", "node-c", "node-d", "node-e", "node-f"},
		TaintEviction:  true,
		ControllerArgs: []string{"--taint-eviction-rate=0.2"},
		Cluster:        clusterWithFastTainting(),
	})
	ctx, w, del, ns := e.ctx, e.w, e.del, evictionNS
	down := w.Nodes[:3]
	var pods []*corev1.Pod
	for _, n := range down {
		pods = append(pods, plainPod(ns, "p-"+n, n, world.LostNodeTolerations(0)...))
	}
	startPods(t, ctx, w, pods...)
	for _, n := range down {
		must(t, w.PowerOff(ctx, n))
	}
	names := []string{"p-node-a", "p-node-b", "p-node-c"}
	must(t, del.wait(ctx, nodeLostTimeout+time.Duration(float64(len(down))/rate*float64(time.Second))+30*time.Second, names...))
	var times []time.Time
	for _, n := range names {
		at, _ := del.when(n)
		times = append(times, at)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := 1; i < len(times); i++ {
		// The bucket refills every 5 s; the test's watch adds jitter.
		if gap := times[i].Sub(times[i-1]); gap < 4*time.Second {
			t.Fatalf("evictions %d and %d only %.1f s apart, want at least 1/rate = 5 s", i, i+1, gap.Seconds())
		}
	}
	evs, err := w.Cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", tainteviction.EventStormGuard).String()})
	must(t, err)
	if !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, "RateLimited") }) {
		t.Fatalf("no %s Event says RateLimited: %d Events", tainteviction.EventStormGuard, len(evs.Items))
	}
	t.Logf("evictions at +%.1f s, +%.1f s after the first", times[1].Sub(times[0]).Seconds(), times[2].Sub(times[0]).Seconds())
}

// clusterWithFastTainting has kube-controller-manager taint every lost
// node at once, so that only Fenceline's storm guard paces the evictions.
func clusterWithFastTainting() cluster.Options {
	return cluster.Options{ExtraControllerManagerArgs: []string{"--node-eviction-rate=100"}}
}

// TestTaintEvictionKEP2268: the non-graceful shutdown story with Fenceline's
// taint-eviction in place of kube-controller-manager's. Node A loses power
// with a database and a stateless pod on it. The database is held (not
// graceful-deleted into Terminating) until an operator applies the
// out-of-service taint, then force-deleted and replaced, its volume fenced
// first; the stateless pod is evicted gracefully as upstream does and pod
// GC removes it once the node is out of service, so KEP-2268 recovery
// works as it does with upstream's controller.
func TestTaintEvictionKEP2268(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true, TaintEviction: true})
	del := watchDeletions(t, s.w.Cluster.Client(), s.ns)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	startPods(t, s.ctx, s.w, plainPod(s.ns, "web", nodeA, world.LostNodeTolerations(world.TolerationSeconds)...))

	s.powerOff(nodeA)
	waitEvent(t, s.ctx, s.w.Cluster.Client(), s.ns, "db-0", tainteviction.EventHeld, nodeLostTimeout)
	must(t, del.wait(s.ctx, nodeLostTimeout, "web")) // graceful, as upstream
	if at, _ := del.when("db-0"); !at.IsZero() {
		t.Fatalf("db-0 deleted %.1f s after the power-off, before the node was out of service", at.Sub(s.t0).Seconds())
	}
	oos := time.Now()
	moved := s.outOfService(nodeA)
	if at, gone := del.when("db-0"); at.Before(oos) || disruption(gone) == nil || disruption(gone).Reason != actuator.DisruptionReason {
		t.Fatalf("db-0 deleted at %s (out of service at %s) with %+v, want a force deletion after the taint", at, oos, disruption(gone))
	}
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertInvariant(nodeA, moved.Spec.NodeName)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "web removed by pod GC", func(ctx context.Context) (bool, error) {
		_, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}))
}

// TestTaintEvictionStandsDownBesideUpstream: Fenceline's taint-eviction is
// enabled while kube-controller-manager's still runs (a half-done switch).
// Upstream's first eviction is seen; from then on Fenceline's evicts
// nothing, says why on the pods it holds, and warns on the pod upstream
// acted on, so no pod is evicted by both.
//
// The clocks are set apart on purpose, so that the outcome does not hang
// on which controller fires first: the pods are bound well before the
// taint, whose timeAdded is backdated to their binding. Fenceline counts
// the later pod's toleration from then (EvictAt), upstream from when it
// sees the taint, so the later pod falls due in Fenceline's view
// standDownLead before upstream's, seconds after upstream evicted the
// first pod. Without the stand-down Fenceline evicts it first.
func TestTaintEvictionStandsDownBesideUpstream(t *testing.T) {
	t.Parallel()
	const (
		standDownLead = 6 * time.Second
		toleration    = 9 // seconds: due in Fenceline's view 3 to 4 s after the taint, in upstream's 9 s after
	)
	e := startEvictionWorld(t, world.Options{ControllerArgs: []string{world.TaintEvictionGate}})
	ctx, w, del, ns := e.ctx, e.w, e.del, evictionNS
	startPods(t, ctx, w, plainPod(ns, "first", w.Nodes[0]), plainPod(ns, "later", w.Nodes[0], tolerate(drainTaint, ptr.To[int64](toleration))))
	bound := latestBinding(t, ctx, w, ns, "first", "later")
	select {
	case <-time.After(time.Until(bound.Add(standDownLead))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	taintNodeAddedAt(t, ctx, w, w.Nodes[0], drainTaint, bound)

	warned := waitEvent(t, ctx, w.Cluster.Client(), ns, "first", tainteviction.EventUpstreamActive, startTimeout)
	t.Logf("warning: %s", warned.Message)
	held := waitEvent(t, ctx, w.Cluster.Client(), ns, "later", tainteviction.EventHeld, startTimeout)
	if !strings.Contains(held.Message, "running as well") {
		t.Errorf("hold of the later pod says %q, want that upstream's controller runs as well", held.Message)
	}
	must(t, del.wait(ctx, time.Minute, "first", "later"))
	evs, err := w.Cluster.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", "later"), fields.OneTermEqualSelector("reason", actuator.EventTaintManagerEviction)).String()})
	must(t, err)
	for _, e := range evs.Items {
		if e.Source.Component != tainteviction.UpstreamController {
			t.Errorf("the later pod was marked for deletion by %q too: %s", e.Source.Component, e.Message)
		}
	}
	if len(evs.Items) == 0 {
		t.Error("upstream's eviction Event of the later pod not found")
	}
}

// latestBinding is the latest time any of the pods was bound to its node,
// as EvictAt reads it (PodScheduled's transition, else the creation), at
// the second's resolution the API stores.
func latestBinding(t *testing.T, ctx context.Context, w *world.World, ns string, names ...string) time.Time {
	t.Helper()
	var latest time.Time
	for _, name := range names {
		p, err := w.Cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		at := p.CreationTimestamp.Time
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
				at = c.LastTransitionTime.Time
			}
		}
		if at.After(latest) {
			latest = at
		}
	}
	return latest.Add(time.Second)
}

// taintNodeAddedAt adds a NoExecute taint whose timeAdded is at (a taint
// whose writer's clock, or whose copy from another node, says it is older
// than its write).
func taintNodeAddedAt(t *testing.T, ctx context.Context, w *world.World, node, key string, at time.Time) {
	t.Helper()
	n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(at))})
	_, err = w.Cluster.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	must(t, err)
}
