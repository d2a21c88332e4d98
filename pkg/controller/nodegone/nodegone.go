package nodegone

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
)

// Name is the controller's name for --controllers.
const Name = "node-gone"

// EventNotDetached (Warning, on the VolumeAttachment): the node is gone
// but the volume stays attached, for want of a fence.
const EventNotDetached = "FencelineNodeGoneNotDetached"

// Evidence is the attacher evidence node-gone reads: from the caches for
// the sync, fresh right before the delete.
type Evidence interface {
	// Serving answers from the caches.
	Serving(driver string, now time.Time) (ok bool, missing string)
	// ServingFresh answers from the API server.
	ServingFresh(ctx context.Context, driver string) (ok bool, missing string, err error)
	// AddHandler registers f, called when a driver's verdict changes.
	AddHandler(f func(driver string))
}

// Controller detaches, fenced, what is left attached to deleted nodes.
type Controller struct {
	act      *actuator.Actuator
	nodes    corelisters.NodeLister
	vas      cache.Indexer
	cached   view.View
	fresh    view.View
	evidence Evidence
	queue    *nodequeue.Queue

	mu     sync.Mutex
	warned map[types.UID]string // last warning reported per VolumeAttachment
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator, evidence Evidence) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	nodeInf := f.Core().V1().Nodes().Informer()
	c := &Controller{
		act:      act,
		nodes:    f.Core().V1().Nodes().Lister(),
		vas:      vaInf.GetIndexer(),
		cached:   view.Informers{Nodes: f.Core().V1().Nodes().Lister(), Pods: podInf.GetIndexer(), VAs: vaInf.GetIndexer()},
		fresh:    view.API{Client: act.Client},
		evidence: evidence,
		warned:   map[types.UID]string{},
	}
	c.queue = nodequeue.New(Name, c.sync)
	// Only a node's creation and deletion matter; a pod or a
	// VolumeAttachment that appears or goes may change the verdict.
	never := func(_, _ *v1.Node) bool { return false }
	if err := nodequeue.AddHandler(nodeInf, "node", c.queue.NodeHandler(never)); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(podInf, "pod", c.queue.PodHandler(func(_, _ *v1.Pod) bool { return false })); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(vaInf, "VolumeAttachment", c.queue.VAHandler()); err != nil {
		return nil, err
	}
	evidence.AddHandler(c.enqueueGoneNodes)
	return c, nil
}

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.queue.Run(ctx, workers) }

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	if n, err := nodeutil.Lookup(c.nodes, nodeName); n != nil || err != nil {
		return 0, err // fast path: the node exists
	}
	vas, err := c.cached.VolumeAttachmentsOnNode(ctx, nodeName)
	if len(vas) == 0 || err != nil {
		return 0, err
	}
	pods, err := c.cached.PodsOnNode(ctx, nodeName)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, va := range vas {
		ok, missing := c.evidence.Serving(va.Spec.Attacher, time.Now())
		d := Decide(Input{VA: va, Pods: pods, AttacherFences: ok, Missing: missing})
		if !d.Warn {
			c.forgetWarning(va.UID)
		}
		switch {
		case d.Warn:
			c.warn(va, d.Why)
		case d.Detach:
			errs = append(errs, c.detach(ctx, va, d.Why))
		default:
			klog.FromContext(ctx).V(5).Info("Not detaching", "volumeAttachment", klog.KObj(va), "why", d.Why)
		}
	}
	return 0, errors.Join(errs...)
}

// detach records the fence intent on va, then deletes it once Decide,
// made again on the node, the pods and the attacher evidence read fresh,
// still says so.
func (c *Controller) detach(ctx context.Context, va *storagev1.VolumeAttachment, why string) error {
	node := &v1.Node{}
	node.Name = va.Spec.NodeName
	in := actuator.Intent{Reason: cutoff.ReasonNodeGone, Controller: Name, Node: node, Cached: []*storagev1.VolumeAttachment{va}}
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		in.PVs = []string{*pv}
	} else {
		in.AllOfNode = true // an inline volume: every VolumeAttachment of the node given is this one
	}
	if err := c.act.RecordIntent(ctx, in); err != nil {
		return err
	}
	err := c.act.DeleteVolumeAttachment(ctx, va, why, c.recheck)
	if actuator.IsDecisionChanged(err) {
		return nil // recorded; the event that changed it enqueues the node again
	}
	return err
}

// recheck is Decide on fresh data, for the actuator.
func (c *Controller) recheck(ctx context.Context, va *storagev1.VolumeAttachment) (bool, string, error) {
	node, err := c.fresh.Node(ctx, va.Spec.NodeName)
	if err != nil {
		return false, "", err
	}
	in := Input{VA: va, Node: node}
	if node == nil {
		if in.Pods, err = c.fresh.PodsOnNode(ctx, va.Spec.NodeName); err != nil {
			return false, "", err
		}
		if in.AttacherFences, in.Missing, err = c.evidence.ServingFresh(ctx, va.Spec.Attacher); err != nil {
			return false, "", err
		}
	}
	d := Decide(in)
	return d.Detach, d.Why, nil
}

// warn records a Warning Event on va once per distinct reason.
func (c *Controller) warn(va *storagev1.VolumeAttachment, why string) {
	c.mu.Lock()
	seen := c.warned[va.UID] == why
	c.warned[va.UID] = why
	c.mu.Unlock()
	if !seen {
		c.act.Recorder.Event(va, v1.EventTypeWarning, EventNotDetached, why)
	}
}

func (c *Controller) forgetWarning(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.warned, uid)
}

// enqueueGoneNodes re-queues the nodes of every VolumeAttachment whose
// node is gone when a driver's attacher evidence changes. Such changes are
// rare (an attacher starts, stops or goes stale), so one pass over the
// VolumeAttachment cache is cheap.
func (c *Controller) enqueueGoneNodes(string) {
	for _, obj := range c.vas.List() {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok {
			continue
		}
		if n, _ := nodeutil.Lookup(c.nodes, va.Spec.NodeName); n == nil {
			c.queue.Enqueue(va.Spec.NodeName)
		}
	}
}
