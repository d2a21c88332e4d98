package outofservice

import (
	"context"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "out-of-service-taint-removal"

// Controller removes the out-of-service taint from recovered nodes.
type Controller struct {
	act   *actuator.Actuator
	nodes corelisters.NodeLister
	// cached is the controller's view of its caches, for Gather.
	cached view.View
	queue  *nodequeue.Queue
	now    func() time.Time
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		act:    act,
		nodes:  f.Core().V1().Nodes().Lister(),
		cached: view.Informers{Nodes: f.Core().V1().Nodes().Lister(), Pods: podInf.GetIndexer(), VAs: vaInf.GetIndexer()},
		now:    time.Now,
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
			return 0, nil // fast path: nothing to remove, nothing to forget
		}
	}
	in, err := Gather(ctx, c.cached, nodeName)
	if in.Node == nil || err != nil {
		return 0, err
	}
	d := in.Decide()
	klog.FromContext(ctx).V(4).Info("Out-of-service decision", "why", d.Why)
	// Each write re-checks its part of the decision on fresh data: the
	// node the actuator just read, the pods and VolumeAttachments read
	// from the API server (a cache that lags may miss a VolumeAttachment
	// still there). What cannot be read refuses the write.
	recheck := func(want func(Decision) bool) actuator.NodeCheck {
		return func(fresh *v1.Node) (bool, string) {
			fin, err := Gather(ctx, view.API{Client: c.act.Client}, nodeName)
			if err != nil {
				return false, "the node's pods and VolumeAttachments could not be read fresh: " + err.Error()
			}
			fin.Node = fresh
			fd := fin.Decide()
			return want(fd), fd.Why
		}
	}
	if d.RecordBootID {
		return 0, c.act.UpdateNode(ctx, node, "record boot ID", recheck(func(d Decision) bool { return d.RecordBootID }), c.record)
	}
	if d.Untaint {
		if err := c.act.RemoveTaint(ctx, node, names.OutOfServiceTaint, "", d.Why, recheck(func(d Decision) bool { return d.Untaint })); err != nil {
			return 0, err
		}
	}
	if d.ClearRecord {
		return 0, c.act.UpdateNode(ctx, node, "clear boot ID record", recheck(func(d Decision) bool { return d.ClearRecord }), func(n *v1.Node) bool {
			if _, ok := n.Annotations[names.BootIDAnnotation]; !ok {
				return false
			}
			delete(n.Annotations, names.BootIDAnnotation)
			return true
		})
	}
	return 0, nil
}

// record writes the boot ID for the current taint. A taint without
// timeAdded (kubectl sets none for NoSchedule) gets it now, in the same
// update, so that the record names the episode it belongs to.
func (c *Controller) record(n *v1.Node) bool {
	i := slices.IndexFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == names.OutOfServiceTaint })
	if i < 0 {
		return false
	}
	if n.Spec.Taints[i].TimeAdded == nil {
		now := metav1.NewTime(c.now())
		n.Spec.Taints[i].TimeAdded = &now
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[names.BootIDAnnotation] = Record(n.Status.NodeInfo.BootID, n.Spec.Taints[i].TimeAdded.Time)
	return true
}
