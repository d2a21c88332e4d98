package outofservice

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "out-of-service-taint-removal"

// Controller removes the out-of-service taint from recovered nodes.
type Controller struct {
	act   *actuator.Actuator
	nodes corelisters.NodeLister
	pods  cache.Indexer
	vas   cache.Indexer
	queue *nodequeue.Queue
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		act:   act,
		nodes: f.Core().V1().Nodes().Lister(),
		pods:  podInf.GetIndexer(),
		vas:   vaInf.GetIndexer(),
	}
	c.queue = nodequeue.New(Name, c.sync)
	if err := nodequeue.AddHandler(f.Core().V1().Nodes().Informer(), "node", c.queue.NodeHandler(func(old, cur *v1.Node) bool {
		return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
			nodeutil.HasTaint(old, names.OutOfServiceTaint) != nodeutil.HasTaint(cur, names.OutOfServiceTaint) ||
			old.Status.NodeInfo.BootID != cur.Status.NodeInfo.BootID ||
			old.Annotations[names.BootIDAnnotation] != cur.Annotations[names.BootIDAnnotation]
	})); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(podInf, "pod", c.queue.PodHandler(podutil.TerminatingChanged)); err != nil {
		return nil, err
	}
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
		if _, ok := node.Annotations[names.BootIDAnnotation]; !ok {
			return 0, nil
		}
	}
	pods, err := nodeutil.PodsOnNode(c.pods, nodeName)
	if err != nil {
		return 0, err
	}
	terminating := 0
	for _, p := range pods {
		if podutil.IsTerminating(p) {
			terminating++
		}
	}
	vas, err := nodeutil.VAsOnNode(c.vas, nodeName)
	if err != nil {
		return 0, err
	}
	d := Decide(node, terminating, len(vas))
	klog.FromContext(ctx).V(4).Info("Out-of-service decision", "why", d.Why)
	if d.RecordBootID {
		boot := node.Status.NodeInfo.BootID
		return 0, c.act.SetNodeAnnotation(ctx, node, names.BootIDAnnotation, &boot)
	}
	if d.Untaint {
		if err := c.act.RemoveTaint(ctx, node, names.OutOfServiceTaint, d.Why); err != nil {
			return 0, err
		}
	}
	if d.ClearRecord {
		return 0, c.act.SetNodeAnnotation(ctx, node, names.BootIDAnnotation, nil)
	}
	return 0, nil
}
