package fencecoverage

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
)

// Events on a FencePolicy.
const (
	// EventNodeNotFenceable (Warning): a node the policy selects cannot be
	// fenced now, or cannot for another reason than before.
	EventNodeNotFenceable = "FencelineNodeNotFenceable"
	// EventNodeFenceable (Normal): a node listed as not fenceable can be
	// fenced again.
	EventNodeFenceable = "FencelineNodeFenceable"
	// maxEventsPerSync bounds the Events of one sync (the first sync of a
	// large cluster without FenceTargets); the status lists the rest.
	maxEventsPerSync = 10
)

// DefaultCoalesce is how long a change waits before its policies are
// looked at again: every FenceTarget probed at once costs one sync.
const DefaultCoalesce = 2 * time.Second

// Config wires the controller.
type Config struct {
	// Informers give the nodes; Fencing the policies, classes and targets.
	Informers informers.SharedInformerFactory
	Fencing   fencinginformers.SharedInformerFactory
	// Client writes the policies' status (JSON content type).
	Client versioned.Interface
	// Recorder records Events on FencePolicies.
	Recorder record.EventRecorder
	// Metrics are the controller's own; nil records none.
	Metrics *Metrics
	// Coalesce is DefaultCoalesce when zero.
	Coalesce time.Duration
}

// Controller keeps every FencePolicy's status.coverage, one policy per
// sync.
type Controller struct {
	cfg      Config
	nodes    corelisters.NodeLister
	policies fencinglisters.FencePolicyLister
	classes  fencinglisters.FenceClassLister
	targets  fencinglisters.FenceTargetLister
	queue    *keyloop.Loop[string]
	// targetQueue holds FenceTargets whose Node may have come or gone.
	targetQueue *keyloop.Loop[string]

	mu sync.Mutex
	// reported are the uncovered nodes each policy's last sync reported,
	// with their reason, so that an Event says what changed.
	reported map[string]map[string]string
	// orphans are the FenceTargets that name no Node.
	orphans map[string]bool
}

// New wires the controller to the shared informers; call it before they
// start. The fencing API must be served.
func New(cfg Config) (*Controller, error) {
	if cfg.Coalesce == 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	fv := cfg.Fencing.Fencing().V1alpha1()
	c := &Controller{
		cfg:      cfg,
		nodes:    cfg.Informers.Core().V1().Nodes().Lister(),
		policies: fv.FencePolicies().Lister(),
		classes:  fv.FenceClasses().Lister(),
		targets:  fv.FenceTargets().Lister(),
		reported: map[string]map[string]string{},
		orphans:  map[string]bool{},
	}
	c.queue = keyloop.New(keyloop.Config{Name: Name, KeyName: "policy"}, c.sync)
	c.targetQueue = keyloop.New(keyloop.Config{Name: Name + "-targets", KeyName: "fenceTarget"}, c.syncTarget)
	all := func(any) { c.enqueueAll() }
	// A node or FenceTarget that comes or goes changes both questions:
	// the policies' coverage, and whether a target names a Node.
	comesOrGoes := func(obj any) {
		c.enqueueAll()
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.targetQueue.Add(key)
		}
	}
	nodeInf, targetInf := cfg.Informers.Core().V1().Nodes().Informer(), fv.FenceTargets().Informer()
	if err := nodequeue.AddHandler(nodeInf, "node", cache.ResourceEventHandlerFuncs{
		AddFunc: comesOrGoes, DeleteFunc: comesOrGoes,
		UpdateFunc: func(old, cur any) {
			if o, ok := old.(*v1.Node); ok {
				if n, ok := cur.(*v1.Node); ok && labels.Equals(o.Labels, n.Labels) {
					return // a heartbeat or a status change: the selection is the same
				}
			}
			c.enqueueAll()
		},
	}); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(fv.FencePolicies().Informer(), "FencePolicy", cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue, UpdateFunc: func(_, cur any) { c.enqueue(cur) }, DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(fv.FenceClasses().Informer(), "FenceClass", cache.ResourceEventHandlerFuncs{
		AddFunc: all, UpdateFunc: func(any, any) { c.enqueueAll() }, DeleteFunc: all,
	}); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(targetInf, "FenceTarget", cache.ResourceEventHandlerFuncs{
		AddFunc: comesOrGoes, DeleteFunc: comesOrGoes,
		UpdateFunc: func(old, cur any) {
			if o, ok := old.(*fencingv1alpha1.FenceTarget); ok {
				if n, ok := cur.(*fencingv1alpha1.FenceTarget); ok && !targetChanged(o, n) {
					return // a probe that found nothing new
				}
			}
			c.enqueueAll()
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// targetChanged reports a change of what coverage reads: the spec, its
// generation, the probe's generation and condition (not its time).
func targetChanged(old, cur *fencingv1alpha1.FenceTarget) bool {
	return old.Generation != cur.Generation || old.Status.ObservedGeneration != cur.Status.ObservedGeneration ||
		!equality.Semantic.DeepEqual(old.Spec, cur.Spec) || !equality.Semantic.DeepEqual(old.Status.Conditions, cur.Status.Conditions)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		c.queue.AddAfter(key, c.cfg.Coalesce)
	}
}

// enqueueAll looks at every policy again: a node, class or target change
// may change any policy's coverage. Policies are few; the delay collapses
// a burst of changes into one sync each.
func (c *Controller) enqueueAll() {
	ps, err := c.policies.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range ps {
		c.queue.AddAfter(p.Name, c.cfg.Coalesce)
	}
}

// Run processes policies and FenceTargets until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Go(func() { c.targetQueue.Run(ctx, 1) })
	c.queue.Run(ctx, workers)
	wg.Wait()
}

func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	policy, err := c.policies.Get(name)
	if apierrors.IsNotFound(err) {
		c.cfg.Metrics.forget(name)
		c.mu.Lock()
		delete(c.reported, name)
		c.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	in, err := c.gather(policy)
	if err != nil {
		return 0, err
	}
	selected, uncovered := Assess(in)
	cov := Coverage(policy, selected, uncovered)
	c.cfg.Metrics.set(name, cov.SelectedNodes, cov.UncoveredNodes)
	c.report(ctx, policy, cov, uncovered)
	if policy.Status.Coverage != nil && equality.Semantic.DeepEqual(*policy.Status.Coverage, cov) {
		return 0, nil
	}
	return 0, c.write(ctx, policy, cov)
}

// gather reads Decide's input from the caches.
func (c *Controller) gather(policy *fencingv1alpha1.FencePolicy) (Input, error) {
	in := Input{Policy: policy, Targets: map[string]*fencingv1alpha1.FenceTarget{}}
	var err error
	if in.Policies, err = c.policies.List(labels.Everything()); err != nil {
		return in, err
	}
	classes, err := c.classes.List(labels.Everything())
	if err != nil {
		return in, err
	}
	byName := make(map[string]*fencingv1alpha1.FenceClass, len(classes))
	for _, cl := range classes {
		byName[cl.Name] = cl
	}
	in.Problem = nodefencing.PolicyProblem(policy, byName)
	if in.Nodes, err = c.nodes.List(nodefencing.Selector(policy)); err != nil {
		return in, err
	}
	// A node's FenceTarget is named after it: one cache lookup per
	// selected node, not every target of the cluster per policy.
	for _, n := range in.Nodes {
		t, err := c.targets.Get(n.Name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return in, err
		}
		in.Targets[n.Name] = t
	}
	return in, nil
}

// write stores cov in the policy's status, on a fresh read so that the
// storm guard's state beside it is kept.
func (c *Controller) write(ctx context.Context, policy *fencingv1alpha1.FencePolicy, cov fencingv1alpha1.FenceCoverage) error {
	policies := c.cfg.Client.FencingV1alpha1().FencePolicies()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := policies.Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != policy.UID {
			return nil // deleted and created again: its own sync follows
		}
		cur.Status.Coverage = &cov
		_, err = policies.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the coverage of FencePolicy %s: %w", policy.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Fence coverage written", "policy", policy.Name, "selected", cov.SelectedNodes, "uncovered", cov.UncoveredNodes)
	return nil
}

// report records an Event for each node that became uncovered (or
// uncovered for another reason) and each that is covered again, at most
// maxEventsPerSync, and remembers every uncovered node (not only those the
// status lists).
func (c *Controller) report(ctx context.Context, policy *fencingv1alpha1.FencePolicy, cov fencingv1alpha1.FenceCoverage, uncovered []fencingv1alpha1.UncoveredNode) {
	now := make(map[string]string, len(uncovered))
	for _, u := range uncovered {
		now[u.Node] = u.Reason
	}
	c.mu.Lock()
	before := c.reported[policy.Name]
	c.reported[policy.Name] = now
	c.mu.Unlock()
	events := 0
	for _, u := range uncovered {
		if before[u.Node] == u.Reason || events == maxEventsPerSync {
			continue
		}
		events++
		c.cfg.Recorder.Eventf(policy, v1.EventTypeWarning, EventNodeNotFenceable, "Node %s cannot be fenced: %s: %s", u.Node, u.Reason, u.Message)
	}
	for node := range before {
		if _, still := now[node]; still || events == maxEventsPerSync {
			continue
		}
		events++
		c.cfg.Recorder.Eventf(policy, v1.EventTypeNormal, EventNodeFenceable, "Node %s can be fenced again", node)
	}
	if events > 0 {
		klog.FromContext(ctx).Info("Fence coverage changed", "policy", policy.Name, "selected", cov.SelectedNodes, "uncovered", cov.UncoveredNodes)
	}
}
