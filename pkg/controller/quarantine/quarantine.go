package quarantine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
const Name = "quarantine"

// DefaultDelay is the default --quarantine-delay: how long a node's Ready
// condition must not have been True before quarantine acts, in line with
// upstream's node-monitor grace period.
const DefaultDelay = 40 * time.Second

// DefaultLiftDelay is the default --quarantine-lift-delay: how long a node
// must be Ready before its quarantine may be lifted, so that its kubelet
// has reported the volumes it still has mounted.
const DefaultLiftDelay = 10 * time.Second

// EventNotSafe is the Event reason on a pod that quarantine leaves alone.
const EventNotSafe = "FencelineNotSafeToForceDelete"

// Controller quarantines NotReady nodes and recovers safe-detach pods.
type Controller struct {
	act   *actuator.Actuator
	delay time.Duration
	// liftDelay is how long the node must be Ready before lifting.
	liftDelay time.Duration
	now       func() time.Time
	nodes     corelisters.NodeLister
	pods      cache.Indexer
	vas       cache.Indexer
	resolver  *resolver
	queue     *nodequeue.Queue

	mu          sync.Mutex
	refused     map[types.UID]string // last refusal reported per pod
	quarantined map[string]bool
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator, delay, liftDelay time.Duration) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		act:       act,
		delay:     delay,
		liftDelay: liftDelay,
		now:       time.Now,
		nodes:     f.Core().V1().Nodes().Lister(),
		pods:      podInf.GetIndexer(),
		vas:       vaInf.GetIndexer(),
		resolver: &resolver{
			pvcs:    f.Core().V1().PersistentVolumeClaims().Lister(),
			pvs:     f.Core().V1().PersistentVolumes().Lister(),
			drivers: f.Storage().V1().CSIDrivers().Lister(),
		},
		refused:     map[types.UID]string{},
		quarantined: map[string]bool{},
	}
	c.queue = nodequeue.New(Name, c.sync)
	if err := nodequeue.AddHandler(f.Core().V1().Nodes().Informer(), "node", c.queue.NodeHandler(func(old, cur *v1.Node) bool {
		// volumesInUse changes when a returning kubelet cleans up.
		return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
			nodeutil.HasTaint(old, names.QuarantineTaint) != nodeutil.HasTaint(cur, names.QuarantineTaint) ||
			!slices.Equal(old.Status.VolumesInUse, cur.Status.VolumesInUse)
	})); err != nil {
		return nil, err
	}
	podHandler := c.queue.PodHandler(podutil.TerminatingChanged)
	if err := nodequeue.AddHandler(podInf, "pod", cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { podHandler.OnAdd(obj, false) },
		UpdateFunc: podHandler.OnUpdate,
		DeleteFunc: func(obj any) {
			if p, ok := nodequeue.DeletedObject[*v1.Pod](obj); ok {
				c.mu.Lock()
				delete(c.refused, p.UID)
				c.mu.Unlock()
			}
			podHandler.OnDelete(obj)
		},
	}); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(vaInf, "VolumeAttachment", c.queue.VAHandler()); err != nil {
		return nil, err
	}
	// Resolving volumes reads these caches; they must be synced too.
	f.Core().V1().PersistentVolumeClaims().Informer()
	f.Core().V1().PersistentVolumes().Informer()
	f.Storage().V1().CSIDrivers().Informer()
	return c, nil
}

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.queue.Run(ctx, workers) }

func (c *Controller) setQuarantined(name string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.quarantined[name] = true
	} else {
		delete(c.quarantined, name)
	}
	if c.act.Metrics != nil {
		c.act.Metrics.QuarantinedNodes.Set(float64(len(c.quarantined)))
	}
}

func (c *Controller) isSafeDriver(name string) bool {
	safe, _ := c.resolver.safeDetach(name)
	return safe
}

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	node, err := nodeutil.Lookup(c.nodes, nodeName)
	if err != nil {
		return 0, err
	}
	if node == nil {
		c.setQuarantined(nodeName, false)
		return 0, nil
	}
	c.setQuarantined(nodeName, nodeutil.HasTaint(node, names.QuarantineTaint))
	pods, err := nodeutil.PodsOnNode(c.pods, nodeName)
	if err != nil {
		return 0, err
	}
	if nodeutil.IsReady(node) {
		return c.maybeUntaint(ctx, node, pods)
	}
	now := c.now()
	r := c.handlePods(ctx, node, pods, now)
	if r.needTaint {
		// The pods are deleted on the next sync, which the taint's own
		// update event triggers: deletion never precedes the taint.
		err := c.act.AddTaint(ctx, node, v1.Taint{Key: names.QuarantineTaint, Effect: v1.TaintEffectNoSchedule},
			"node not Ready for "+c.delay.String()+" with pods of safe-detach CSI drivers stuck terminating")
		if err != nil || !c.act.DryRun {
			return r.requeue, errors.Join(append(r.errs, err)...)
		}
		// Dry run: no taint was written and no update event follows;
		// carry on as if it had been, to show the rest of the plan.
		node = node.DeepCopy()
		node.Spec.Taints = append(node.Spec.Taints, v1.Taint{Key: names.QuarantineTaint, Effect: v1.TaintEffectNoSchedule})
		r = c.handlePods(ctx, node, pods, now)
	}
	if rel := VolumesToRelease(node, c.isSafeDriver, r.inUse); len(rel) > 0 {
		if _, err := c.act.ReleaseVolumes(ctx, node, rel, false, "no pod on the quarantined node uses them; the attacher fences them on detach"); err != nil {
			r.errs = append(r.errs, err)
		}
	}
	return r.requeue, errors.Join(r.errs...)
}

// podsResult is what one pass over a node's pods found and did.
type podsResult struct {
	errs      []error
	requeue   time.Duration
	needTaint bool
	// inUse holds the CSI volumes that live pods on the node still use.
	inUse map[v1.UniqueVolumeName]bool
}

// handlePods decides for every pod on the node and force-deletes those that
// qualify.
func (c *Controller) handlePods(ctx context.Context, node *v1.Node, pods []*v1.Pod, now time.Time) podsResult {
	logger := klog.FromContext(ctx)
	r := podsResult{inUse: map[v1.UniqueVolumeName]bool{}}
	for _, pod := range pods {
		vols, err := c.resolver.podVolumes(pod)
		if err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		deleted := false
		d := DecidePod(node, pod, vols, now, c.delay)
		switch d.Action {
		case Wait:
			if r.requeue == 0 || d.After < r.requeue {
				r.requeue = d.After
			}
		case Refuse:
			c.reportRefusal(pod, d.Why)
		case TaintFirst:
			r.needTaint = true
		case Delete:
			trigger := nodequeue.Latest(nodeutil.NotReadySince(node).Add(c.delay), deletionRequested(pod))
			if err := c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonSafeDetach, Message: d.Why, Trigger: trigger}); err != nil {
				r.errs = append(r.errs, err)
			} else {
				deleted = true
			}
		default:
			logger.V(5).Info("Leaving pod alone", "pod", klog.KObj(pod), "why", d.Why)
		}
		if !deleted && !podutil.IsForceDeleted(pod) {
			for _, v := range vols {
				if v.Kind == KindCSI {
					r.inUse[v.UniqueName()] = true
				}
			}
		}
	}
	return r
}

func (c *Controller) maybeUntaint(ctx context.Context, node *v1.Node, pods []*v1.Pod) (time.Duration, error) {
	if !nodeutil.HasTaint(node, names.QuarantineTaint) {
		return 0, nil
	}
	vas, err := nodeutil.VAsOnNode(c.vas, node.Name)
	if err != nil {
		return 0, err
	}
	safe := 0
	for _, va := range vas {
		if c.isSafeDriver(va.Spec.Attacher) {
			safe++
		}
	}
	inUse := map[v1.UniqueVolumeName]bool{}
	for _, pod := range pods {
		if podutil.IsForceDeleted(pod) {
			continue
		}
		vols, err := c.resolver.podVolumes(pod)
		if err != nil {
			return 0, err
		}
		for _, v := range vols {
			if v.Kind == KindCSI {
				inUse[v.UniqueName()] = true
			}
		}
	}
	stale := len(UnusedSafeVolumes(node, c.isSafeDriver, inUse))
	d := DecideUntaint(node, safe, stale, c.now(), c.liftDelay)
	if !d.Untaint {
		klog.FromContext(ctx).V(4).Info("Keeping quarantine", "why", d.Why)
		return d.After, nil
	}
	return 0, c.act.RemoveTaint(ctx, node, names.QuarantineTaint, d.Why)
}

// reportRefusal records an Event on the pod once per distinct reason.
func (c *Controller) reportRefusal(pod *v1.Pod, why string) {
	c.mu.Lock()
	seen := c.refused[pod.UID] == why
	c.refused[pod.UID] = why
	c.mu.Unlock()
	if !seen {
		c.act.PodEvent(pod, v1.EventTypeWarning, EventNotSafe, why)
	}
}

func deletionRequested(pod *v1.Pod) time.Time {
	t, _ := podutil.DeletionRequestedAt(pod)
	return t
}
