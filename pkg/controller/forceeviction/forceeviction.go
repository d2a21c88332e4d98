package forceeviction

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "force-eviction"

// DefaultReadyGrace is the default --force-eviction-ready-grace: upstream's
// node-monitor grace period, the time the node controller takes to mark a
// dead node NotReady.
const DefaultReadyGrace = 50 * time.Second

// Controller force-evicts pods from tainted NotReady nodes.
type Controller struct {
	act        *actuator.Actuator
	readyGrace time.Duration
	now        func() time.Time
	nodes      corelisters.NodeLister
	pods       cache.Indexer
	vas        cache.Indexer
	queue      *nodequeue.Queue
	clock      *nodequeue.TaintClock
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator, readyGrace time.Duration) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		act:        act,
		readyGrace: readyGrace,
		now:        time.Now,
		nodes:      f.Core().V1().Nodes().Lister(),
		pods:       podInf.GetIndexer(),
		vas:        vaInf.GetIndexer(),
		clock:      nodequeue.NewTaintClock(names.ForceEvictionTaint),
	}
	c.queue = nodequeue.New(Name, c.sync)
	if err := nodequeue.AddHandler(f.Core().V1().Nodes().Informer(), "node", c.queue.ClockedNodeHandler(c.clock, func(old, cur *v1.Node) bool {
		return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
			nodeutil.HasTaint(old, names.ForceEvictionTaint) != nodeutil.HasTaint(cur, names.ForceEvictionTaint) ||
			len(old.Status.VolumesInUse) != len(cur.Status.VolumesInUse) ||
			len(old.Status.VolumesAttached) != len(cur.Status.VolumesAttached)
	})); err != nil {
		return nil, err
	}
	// Any new pod on a tainted node must go too; updates only matter for
	// the resync safety net.
	if err := nodequeue.AddHandler(podInf, "pod", c.queue.PodHandler(func(_, _ *v1.Pod) bool { return false })); err != nil {
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
	if !nodeutil.HasTaint(node, names.ForceEvictionTaint) {
		return 0, nil
	}
	logger := klog.FromContext(ctx)
	pods, err := nodeutil.PodsOnNode(c.pods, nodeName)
	if err != nil {
		return 0, err
	}
	var errs []error
	remaining := 0
	for _, pod := range pods {
		// Re-read the node before every deletion: a kubelet that comes
		// back mid-eviction stops it at once.
		if cur, err := c.nodes.Get(nodeName); err == nil {
			node = cur
		}
		if podutil.ToleratesTaint(pod, nodeutil.FindTaint(node, names.ForceEvictionTaint)) {
			continue
		}
		remaining++
		d := DecidePod(node, pod)
		if !d.Delete {
			logger.V(5).Info("Not deleting pod", "pod", klog.KObj(pod), "why", d.Why)
			continue
		}
		if err := c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonForceEviction, Message: d.Why, Trigger: c.clock.Since(nodeName)}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return 0, errors.Join(errs...)
	}
	vas, err := nodeutil.VAsOnNode(c.vas, nodeName)
	if err != nil {
		return 0, err
	}
	since := c.clock.Since(nodeName)
	if since.IsZero() {
		since = c.now()
	}
	nd := DecideNode(node, remaining, len(vas), since, c.now(), c.readyGrace)
	switch {
	case nd.ReleaseVolumes:
		all := make([]v1.UniqueVolumeName, 0, len(node.Status.VolumesInUse)+len(node.Status.VolumesAttached))
		all = append(all, node.Status.VolumesInUse...)
		for _, a := range node.Status.VolumesAttached {
			all = append(all, a.Name)
		}
		_, err := c.act.ReleaseVolumes(ctx, node, all, true, nd.Why)
		return 0, err
	case nd.Untaint:
		return 0, c.act.RemoveTaint(ctx, node, names.ForceEvictionTaint, nd.Why)
	}
	logger.V(4).Info("Force eviction in progress", "why", nd.Why)
	return nd.After, nil
}
