package tainteviction

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// Name is the controller's name for --controllers.
const Name = "taint-eviction"

// evictParallelism bounds concurrent evictions of one node's pods.
const evictParallelism = 8

// Event reasons of Fenceline's own (the graceful path uses upstream's
// TaintManagerEviction, see actuator.EventTaintManagerEviction).
const (
	// EventHeld: a pod's eviction is due but held, and why.
	EventHeld = "FencelineEvictionHeld"
	// EventStormGuard: the storm guard refused a node's evictions.
	EventStormGuard = "FencelineEvictionStormGuard"
	// EventUpstreamActive: kube-controller-manager's taint-eviction-
	// controller evicted a pod too; Fenceline's stands down.
	EventUpstreamActive = "FencelineUpstreamTaintEvictionActive"
)

// Config sets the controller up.
type Config struct {
	Informers informers.SharedInformerFactory
	Actuator  *actuator.Actuator
	// Client reads the Events of the self-check (upstream's controller
	// still running); the controller's own client.
	Client kubernetes.Interface
	// Guard is the storm guard of evictions from nodes that are not Ready.
	Guard GuardConfig
	// Resync is the period of the self-check's Event informer.
	Resync time.Duration
	// Metrics are taint-eviction's own; nil records none.
	Metrics *Metrics
}

// Controller is fenceline-controller's taint-eviction: the NoExecute taint
// eviction of kube-controller-manager's taint-eviction-controller, made
// storage-aware (see DecidePod). It is keyed by node: a change of a node's
// NoExecute taints, readiness or cut-off state, or of one of its pods,
// enqueues the node, and one sync decides every pod of the node from the
// informer caches, acts on those due, and looks again when the next
// eviction is due.
type Controller struct {
	act     *actuator.Actuator
	metrics *Metrics
	nodes   corelisters.NodeLister
	pods    cache.Indexer
	// vas are the VolumeAttachments, indexed by node: a cached intent is
	// not written again.
	vas      cache.Indexer
	volumes  *podvolumes.Resolver
	queue    *nodequeue.Queue
	seen     *firstSeen
	guard    *guard
	upstream *upstreamWatch
	tracker  *tracker
	now      func() time.Time
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(cfg Config) (*Controller, error) {
	f := cfg.Informers
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	nodeInf := f.Core().V1().Nodes().Informer()
	if err := cfg.Guard.Validate(); err != nil {
		return nil, err
	}
	f.Core().V1().PersistentVolumeClaims().Informer()
	f.Core().V1().PersistentVolumes().Informer()
	f.Storage().V1().CSIDrivers().Informer()
	c := &Controller{
		act:     cfg.Actuator,
		metrics: cfg.Metrics,
		nodes:   f.Core().V1().Nodes().Lister(),
		pods:    podInf.GetIndexer(),
		vas:     vaInf.GetIndexer(),
		volumes: podvolumes.NewResolver(f.Core().V1().PersistentVolumeClaims().Lister(),
			f.Core().V1().PersistentVolumes().Lister(), f.Storage().V1().CSIDrivers().Lister()),
		seen:    newFirstSeen(time.Now),
		guard:   newGuard(cfg.Guard),
		tracker: newTracker(),
		now:     time.Now,
	}
	c.queue = nodequeue.New(Name, c.sync)
	c.upstream = newUpstreamWatch(cfg.Client, cfg.Resync, cfg.Actuator, cfg.Metrics, func() time.Time { return c.now() })
	if err := nodequeue.AddHandler(nodeInf, "node", c.nodeHandler()); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(podInf, "pod", c.queue.PodHandler(podChanged)); err != nil {
		return nil, err
	}
	return c, nil
}

// nodeHandler observes the taints' first sighting and enqueues a node
// whose eviction inputs changed (nodequeue.ClockedNodeHandler), and, when
// a node comes, goes or changes readiness, the nodes the storm guard
// refused: the zone counts they were refused on moved.
func (c *Controller) nodeHandler() cache.ResourceEventHandler {
	h := c.queue.ClockedNodeHandler(c.seen, nodeChanged)
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			h.OnAdd(obj, false)
			c.requeueRefused()
		},
		UpdateFunc: func(oldObj, newObj any) {
			h.OnUpdate(oldObj, newObj)
			o, ok1 := oldObj.(*v1.Node)
			n, ok2 := newObj.(*v1.Node)
			if ok1 && ok2 && nodeutil.IsReady(o) != nodeutil.IsReady(n) {
				c.requeueRefused()
			}
		},
		DeleteFunc: func(obj any) {
			h.OnDelete(obj)
			c.requeueRefused()
		},
	}
}

func (c *Controller) requeueRefused() {
	for _, n := range c.guard.Refused() {
		c.queue.Enqueue(n)
	}
}

// nodeChanged: what taint-eviction decides on changed.
func nodeChanged(old, cur *v1.Node) bool {
	return !equality.Semantic.DeepEqual(NoExecuteTaints(old.Spec.Taints), NoExecuteTaints(cur.Spec.Taints)) ||
		nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
		cutoff.NodeReason(old, true) != cutoff.NodeReason(cur, true)
}

// podChanged: upstream's triggers (tolerations, node binding) and
// Fenceline's (deletion started or cancelled, the evict-when hook).
func podChanged(old, cur *v1.Pod) bool {
	if old.Spec.NodeName != cur.Spec.NodeName ||
		!equality.Semantic.DeepEqual(old.Spec.Tolerations, cur.Spec.Tolerations) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		old.Annotations[EvictWhenAnnotation] != cur.Annotations[EvictWhenAnnotation] {
		return true
	}
	cond, ok := cur.Annotations[EvictWhenAnnotation]
	return ok && podConditionTrue(old, cond) != podConditionTrue(cur, cond)
}

// StartCaches starts the self-check's Event informer and waits for it, so
// that an upstream controller that is already evicting is known before
// the first eviction.
func (c *Controller) StartCaches(ctx context.Context) error {
	return c.upstream.Start(ctx)
}

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.queue.Run(ctx, workers) }

// due is one pod whose eviction is due, with its decision's inputs.
type due struct {
	in PodInput
	d  Decision
	// safe: every stateful volume's driver opted into safe detach, for
	// the cut-off reason on the fresh node.
	safe bool
}

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	node, err := nodeutil.Lookup(c.nodes, nodeName)
	if err != nil {
		return 0, err
	}
	if node == nil {
		c.guard.Forget(nodeName)
		c.settle(ctx, nodeName, nil)
		return 0, nil
	}
	untainted := len(NoExecuteTaints(node.Spec.Taints)) == 0
	if nodeutil.IsReady(node) || untainted {
		c.guard.Forget(nodeName)
	}
	if untainted && !c.tracker.has(nodeName) {
		return 0, nil // fast path: nothing evicts here and nothing to cancel
	}
	pods, err := nodeutil.PodsOnNode(c.pods, nodeName)
	if err != nil {
		return 0, err
	}
	now := c.now()
	states := map[podKey]podState{}
	var todo []due
	var next time.Time
	for _, pod := range pods {
		in, safe, err := c.input(node, pod, now)
		if err != nil {
			return 0, err
		}
		d := DecidePod(in)
		switch d.Action {
		case ActionWait:
			states[keyOf(pod)] = podState{action: ActionWait, why: d.Why}
			next = earliest(next, d.At)
		case ActionHold:
			states[keyOf(pod)] = podState{action: ActionHold, why: d.Why}
		case ActionEvict, ActionForceDelete:
			todo = append(todo, due{in: in, d: d, safe: safe})
		}
	}
	var errs []error
	if len(todo) > 0 {
		after, err := c.evictDue(ctx, node, todo, states)
		errs = append(errs, err)
		if after > 0 {
			next = earliest(next, now.Add(after))
		}
	}
	c.settle(ctx, nodeName, states)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if next.IsZero() {
		return 0, nil
	}
	// A little past the due time, so the next sync finds it due.
	return max(next.Sub(c.now()), 0) + 10*time.Millisecond, nil
}

// evictDue evicts the due pods once the self-check and the storm guard
// allow it; otherwise it records them as held and returns when to look
// again (zero: an event will tell).
func (c *Controller) evictDue(ctx context.Context, node *v1.Node, todo []due, states map[podKey]podState) (time.Duration, error) {
	ok, why, after := c.mayEvict(ctx, node)
	if !ok {
		for _, t := range todo {
			states[keyOf(t.in.Pod)] = podState{action: ActionHold, why: t.d.Why + "; " + why}
		}
		return after, nil
	}
	errs := make([]error, len(todo))
	workqueue.ParallelizeUntil(ctx, evictParallelism, len(todo), func(i int) {
		errs[i] = c.evictOne(ctx, todo[i])
	})
	for _, t := range todo {
		states[keyOf(t.in.Pod)] = podState{action: actionEvicted}
	}
	return 0, errors.Join(errs...)
}

// mayEvict is the cluster-level gate in front of a node's evictions: none
// while upstream's controller runs too; on a node that is not Ready, the
// storm guard's admission (once per node and failure).
func (c *Controller) mayEvict(ctx context.Context, node *v1.Node) (bool, string, time.Duration) {
	now := c.now()
	if until, active := c.upstream.Active(now); active {
		return false, standDownWhy, until.Sub(now)
	}
	if nodeutil.IsReady(node) {
		return true, "", 0
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return false, fmt.Sprintf("listing nodes for the storm guard: %v", err), time.Second
	}
	g := c.guard.Admit(node, nodes, now)
	if !g.Admit {
		c.metrics.observeRefusal(g.Reason)
		if c.guard.Changed(node.Name, g.Reason) {
			c.act.Recorder.Eventf(node, v1.EventTypeWarning, EventStormGuard, "Evictions of the node's pods held: %s (%s)", g.Why, g.Reason)
			klog.FromContext(ctx).Info("Storm guard holds the node's evictions", "reason", g.Reason, "why", g.Why)
		}
		return false, "storm guard: " + g.Why, g.RetryAfter
	}
	return true, "", 0
}

// evictOne acts on one due pod, re-deciding on the fresh node and pod at
// write time.
func (c *Controller) evictOne(ctx context.Context, t due) error {
	pod := t.in.Pod
	check := c.recheck(t.in, t.safe, t.d.Action)
	var err error
	switch t.d.Action {
	case ActionEvict:
		err = c.act.EvictPod(ctx, pod, actuator.Eviction{Message: t.d.Why, Recheck: check})
	case ActionForceDelete:
		// Intent before cause: the pod's volumes will be detached once it
		// is gone, and whatever the node looks like by then, the detach is
		// fenced.
		if err = c.recordIntents(ctx, t); err == nil {
			err = c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonTaintEviction, Message: t.d.Why, Trigger: t.d.At, Recheck: check})
		}
	}
	if err == nil && !c.act.DryRun {
		c.metrics.observeEviction(t.d.At, c.now())
	}
	return err
}

// recordIntents writes the fence intent (the node's cut-off reason) on the
// VolumeAttachments of the pod's CSI volumes before its force deletion.
func (c *Controller) recordIntents(ctx context.Context, t due) error {
	vols, err := c.volumes.PodVolumes(t.in.Pod)
	if err != nil {
		return fmt.Errorf("resolving the volumes of pod %s/%s for their fence intent: %w", t.in.Pod.Namespace, t.in.Pod.Name, err)
	}
	names, pvs := podvolumes.CSIVolumes(vols)
	// The cached VolumeAttachments let an intent already recorded (by
	// node-fencing before its out-of-service taint) stand without a write:
	// any intent means "fence".
	cached, err := nodeutil.VAsOnNode(c.vas, t.in.Node.Name)
	if err != nil {
		return err
	}
	return c.act.RecordIntent(ctx, actuator.Intent{Reason: t.in.CutOff, Controller: Name, Node: t.in.Node, Volumes: names, PVs: pvs, Cached: cached})
}

// recheck is RecheckEviction on the node and pod read fresh at write time
// and the self-check as it stands then: the write goes ahead only if
// upstream's controller was not seen acting meanwhile and DecidePod
// decides the same action.
func (c *Controller) recheck(in PodInput, safe bool, want Action) actuator.PodCheck {
	return func(node *v1.Node, pod *v1.Pod) (bool, string) {
		fresh := in
		fresh.Node, fresh.Pod, fresh.Now = node, pod, c.now()
		fresh.CutOff = cutoff.NodeReason(node, safe)
		until, _ := c.upstream.Active(fresh.Now)
		return RecheckEviction(fresh, want, StandDown{Until: until})
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
