package podgc

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "podgc"

// deleteParallelism bounds concurrent force deletions on one node.
const deleteParallelism = 8

// Controller force-deletes terminating pods on out-of-service nodes.
type Controller struct {
	act   *actuator.Actuator
	nodes corelisters.NodeLister
	// cached is the controller's view of its caches, for Gather.
	cached view.View
	queue  *nodequeue.Queue
	clock  *nodequeue.TaintClock
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	nodeInf := f.Core().V1().Nodes().Informer()
	c := &Controller{
		act:    act,
		nodes:  f.Core().V1().Nodes().Lister(),
		cached: view.Informers{Nodes: f.Core().V1().Nodes().Lister(), Pods: podInf.GetIndexer(), VAs: vaInf.GetIndexer()},
		clock:  nodequeue.NewTaintClock(names.OutOfServiceTaint),
	}
	c.queue = nodequeue.New(Name, c.sync)
	if err := nodequeue.AddHandler(nodeInf, "node", c.queue.ClockedNodeHandler(c.clock, func(old, cur *v1.Node) bool {
		return cutoff.NodeDown(old) != cutoff.NodeDown(cur) ||
			nodeutil.HasTaint(old, names.OutOfServiceTaint) != nodeutil.HasTaint(cur, names.OutOfServiceTaint)
	})); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(podInf, "pod", c.queue.PodHandler(podutil.TerminatingChanged)); err != nil {
		return nil, err
	}
	// A VolumeAttachment that appears on an out-of-service node gets its
	// fence intent too.
	if err := nodequeue.AddHandler(vaInf, "VolumeAttachment", c.queue.VAHandler()); err != nil {
		return nil, err
	}
	return c, nil
}

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.queue.Run(ctx, workers) }

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	node, err := nodeutil.Lookup(c.nodes, nodeName)
	if node == nil || err != nil {
		return 0, err
	}
	if !nodeutil.HasTaint(node, names.OutOfServiceTaint) {
		return 0, nil // fast path: nothing on this node can qualify
	}
	in, err := Gather(ctx, c.cached, nodeName)
	if in.Node == nil || err != nil {
		return 0, err
	}
	node = in.Node
	todo, whys := toDelete(ctx, node, in.Pods)
	// The attach/detach controller detaches every volume of the node the
	// moment it sees the taint, before any pod is deleted: the fence intent
	// goes on all of them first, so that no attacher that gets to a detach
	// later (after the taint is gone again) can detach plain.
	fresh, err := c.recordIntent(ctx, actuator.Intent{Reason: cutoff.ReasonOutOfService, Controller: Name, Node: node, AllOfNode: true, Cached: in.VolumeAttachments}, len(todo) > 0)
	if err != nil {
		return 0, err
	}
	// The human already vouched for the whole node: delete its pods in
	// parallel, so a full node is cleared in about one round trip.
	errs := make([]error, len(todo))
	workqueue.ParallelizeUntil(ctx, deleteParallelism, len(todo), func(i int) {
		pod := todo[i]
		requested, _ := podutil.DeletionRequestedAt(pod)
		trigger := nodequeue.Latest(c.clock.Since(nodeName), requested, nodeutil.NotReadySince(node))
		errs[i] = c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: whys[i], Trigger: trigger, Recheck: Recheck, Node: fresh})
	})
	return 0, errors.Join(errs...)
}

// toDelete decides on the cached node which of its pods to force-delete, and
// why; none when the node is not down.
func toDelete(ctx context.Context, node *v1.Node, pods []*v1.Pod) (todo []*v1.Pod, whys []string) {
	if !cutoff.NodeDown(node) {
		return nil, nil
	}
	logger := klog.FromContext(ctx)
	for _, pod := range pods {
		d := Decide(node, pod)
		if !d.Delete {
			logger.V(5).Info("Not deleting pod", "pod", klog.KObj(pod), "why", d.Why)
			continue
		}
		todo, whys = append(todo, pod), append(whys, d.Why)
	}
	return todo, whys
}

// recordIntent records the fence intent on the node's VolumeAttachments
// and, when read is set, reads the node fresh at the same time for the
// deletions' re-check, all of them decided on the same node. That read has
// to begin after the cached decision, not after the intent: begun beside
// the intent writes it saves every deletion a round trip. Its result is
// handed out only once the intent is recorded, so nothing is written to a
// pod before the intent. A failed read yields nil: each deletion then
// reads the node itself, as it would without it.
func (c *Controller) recordIntent(ctx context.Context, in actuator.Intent, read bool) (*actuator.FreshNode, error) {
	if !read {
		return nil, c.act.RecordIntent(ctx, in)
	}
	var fresh *actuator.FreshNode
	done := make(chan struct{})
	go func() {
		defer close(done)
		n, err := c.act.ReadNode(ctx, in.Node.Name)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Fresh read of the node failed; each deletion reads it itself", "node", klog.KObj(in.Node), "err", err)
			return
		}
		fresh = n
	}()
	err := c.act.RecordIntent(ctx, in)
	<-done
	if err != nil {
		return nil, err
	}
	return fresh, nil
}
