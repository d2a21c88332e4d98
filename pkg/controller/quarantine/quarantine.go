package quarantine

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
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
	act *actuator.Actuator
	// metrics are quarantine's own; nil records none.
	metrics *Metrics
	delay   time.Duration
	// liftDelay is how long the node must be Ready before lifting.
	liftDelay time.Duration
	now       func() time.Time
	nodes     corelisters.NodeLister
	// cached is the controller's view of its caches, for Gather.
	cached view.View
	// pvsByVolume finds a volumesInUse entry's PersistentVolume.
	pvsByVolume cache.Indexer
	resolver    *podvolumes.Resolver
	queue       *nodequeue.Queue
	evidence    AttacherEvidence

	mu      sync.Mutex
	refused map[types.UID]string // last refusal reported per pod
	// refusedNow holds the pods whose latest decision was Refuse, for
	// the metric an alert watches (refused keeps a pod until it is gone,
	// to report each reason once).
	refusedNow  map[types.UID]bool
	withheld    map[string]string    // last withheld release reported per node
	quarantined map[string]time.Time // when this process first saw each node quarantined
}

// New wires the controller to the shared informers. Call it before the
// factory is started.
func New(f informers.SharedInformerFactory, act *actuator.Actuator, delay, liftDelay time.Duration, evidence AttacherEvidence, m *Metrics) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		act:       act,
		metrics:   m,
		delay:     delay,
		liftDelay: liftDelay,
		now:       time.Now,
		nodes:     f.Core().V1().Nodes().Lister(),
		cached:    view.Informers{Nodes: f.Core().V1().Nodes().Lister(), Pods: podInf.GetIndexer(), VAs: vaInf.GetIndexer()},
		resolver: podvolumes.NewResolver(f.Core().V1().PersistentVolumeClaims().Lister(),
			f.Core().V1().PersistentVolumes().Lister(), f.Storage().V1().CSIDrivers().Lister()),
		evidence:    evidence,
		refused:     map[types.UID]string{},
		refusedNow:  map[types.UID]bool{},
		withheld:    map[string]string{},
		quarantined: map[string]time.Time{},
	}
	c.queue = nodequeue.New(Name, c.sync)
	// Pods refused, and volumes kept, for want of evidence are looked at
	// again as soon as a driver's evidence changes, not at the next resync.
	evidence.AddHandler(c.enqueueNotReadyNodes)
	if err := nodequeue.AddHandler(f.Core().V1().Nodes().Informer(), "node", c.queue.NodeHandler(func(old, cur *v1.Node) bool {
		// volumesInUse changes when a returning kubelet cleans up.
		return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
			cutoff.IsQuarantined(old) != cutoff.IsQuarantined(cur) ||
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
				c.setRefusedNow(p.UID, false)
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
	pvInf := f.Core().V1().PersistentVolumes().Informer()
	if err := pvInf.AddIndexers(cache.Indexers{pvVolumeIndex: pvUniqueName}); err != nil {
		return nil, fmt.Errorf("adding PersistentVolume index: %w", err)
	}
	c.pvsByVolume = pvInf.GetIndexer()
	f.Storage().V1().CSIDrivers().Informer()
	return c, nil
}

// Run processes events until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.queue.Run(ctx, workers) }

func (c *Controller) setQuarantined(name string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, was := c.quarantined[name]
	switch {
	case on && !was:
		c.quarantined[name] = c.now()
	case !on && was:
		delete(c.quarantined, name)
	}
	c.metrics.setQuarantined(len(c.quarantined), name, c.quarantined[name])
}

func (c *Controller) isSafeDriver(name string) bool {
	safe, _ := c.resolver.SafeDetach(name)
	return safe
}

// quarantineTaint is the taint quarantine adds, lifts and looks for (key
// and effect: a taint with the key and another effect is not ours).
var quarantineTaint = v1.Taint{Key: names.QuarantineTaint, Effect: v1.TaintEffectNoSchedule}

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	in, err := Gather(ctx, c.cached, nodeName)
	if err != nil {
		return 0, err
	}
	node, pods := in.Node, in.Pods
	if node == nil {
		c.setQuarantined(nodeName, false)
		c.forgetWithheld(nodeName)
		return 0, nil
	}
	c.setQuarantined(nodeName, cutoff.IsQuarantined(node))
	if nodeutil.IsReady(node) {
		return c.maybeUntaint(ctx, in)
	}
	now := c.now()
	r := c.handlePods(ctx, node, pods, now)
	if r.taintFor != nil {
		// The pods are deleted on the next sync, which the taint's own
		// update event triggers: deletion never precedes the taint.
		err := c.act.AddTaint(ctx, node, quarantineTaint,
			"node not Ready for "+c.delay.String()+" with pods of safe-detach CSI drivers stuck terminating",
			c.nodeCheck(r.taintFor, TaintFirst))
		if err != nil || !c.act.DryRun {
			return r.requeue, errors.Join(append(r.errs, err)...)
		}
		// Dry run: no taint was written and no update event follows;
		// carry on as if it had been, to show the rest of the plan.
		node = node.DeepCopy()
		node.Spec.Taints = append(node.Spec.Taints, quarantineTaint)
		r = c.handlePods(ctx, node, pods, now)
	}
	if err := c.release(ctx, node, r.inUse, now); err != nil {
		r.errs = append(r.errs, err)
	}
	if down, _ := nodeutil.NotReadyFor(node, now); cutoff.IsQuarantined(node) && down < c.delay {
		r.requeue = minAfter(r.requeue, c.delay-down) // release is due then
	}
	return r.requeue, errors.Join(r.errs...)
}

// release removes from volumesInUse what VolumesToRelease allows, with the
// attacher evidence from the caches, and re-checks that on the fresh node
// and fresh evidence at write time.
func (c *Controller) release(ctx context.Context, node *v1.Node, inUse map[v1.UniqueVolumeName]bool, now time.Time) error {
	r := VolumesToRelease(node, c.isSafeDriver, c.cachedAttachers(unusedSafeDrivers(node, c.isSafeDriver, inUse), now), c.keepListed, inUse, now, c.delay)
	c.reportWithheld(node, r.Withheld)
	if len(r.Volumes) == 0 {
		klog.FromContext(ctx).V(5).Info("Releasing no volume", "why", r.Why)
		return nil
	}
	// Releasing lets the attach/detach controller detach at once: the
	// intent goes first.
	if err := c.recordIntents(ctx, node, nil, r.Volumes); err != nil {
		return err
	}
	_, err := c.act.ReleaseVolumes(ctx, node, r.Volumes, false, r.Why, func(fresh *v1.Node) (bool, string) {
		attachers, err := c.freshAttachers(ctx, volumeDrivers(r.Volumes))
		if err != nil {
			return false, err.Error()
		}
		fr := VolumesToRelease(fresh, c.isSafeDriver, attachers, c.keepListed, inUse, c.now(), c.delay)
		for _, v := range r.Volumes {
			if slices.Contains(fresh.Status.VolumesInUse, v) && !slices.Contains(fr.Volumes, v) {
				return false, fmt.Sprintf("volume %s may no longer be released: %s", v, fr.Why)
			}
		}
		return true, fr.Why
	})
	return err
}

// recordIntents writes the safe-detach fence intent on the
// VolumeAttachments of a pod's CSI volumes (before its force deletion) or of
// released volumes (before the release), so that their detach is fenced
// even if the node is back, untainted, when an attacher gets to it.
func (c *Controller) recordIntents(ctx context.Context, node *v1.Node, vols []podvolumes.Volume, released []v1.UniqueVolumeName) error {
	names, pvs := podvolumes.CSIVolumes(vols)
	for _, v := range released {
		names = append(names, v)
		objs, err := c.pvsByVolume.ByIndex(pvVolumeIndex, string(v))
		if err != nil {
			return err
		}
		for _, o := range objs {
			if pv, ok := o.(*v1.PersistentVolume); ok {
				pvs = append(pvs, pv.Name)
			}
		}
	}
	vas, err := c.cached.VolumeAttachmentsOnNode(ctx, node.Name)
	if err != nil {
		return err
	}
	return c.act.RecordIntent(ctx, actuator.Intent{Reason: cutoff.ReasonSafeDetach, Controller: Name, Node: node, Volumes: names, PVs: pvs, Cached: vas})
}

func minAfter(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

// podVolumes is a pod with its classified volumes and the evidence about
// their attachers, as decided on.
type podVolumes struct {
	pod       *v1.Pod
	vols      []podvolumes.Volume
	attachers Attachers
}

// decidePod is DecidePod with this controller's delay: the one decision
// that both the sync and the write-time re-checks run. The evidence is in
// pv: from the caches for the sync and the taint, read from the API server
// for the force deletion. DecidePod refuses a driver missing from it, so
// no caller can act without having looked.
func (c *Controller) decidePod(node *v1.Node, pv podVolumes, now time.Time) PodDecision {
	return DecidePod(node, pv.pod, pv.vols, pv.attachers, now, c.delay)
}

// nodeCheck re-decides a node write (the taint) for the pod that asked for
// it, on the fresh node.
func (c *Controller) nodeCheck(pv *podVolumes, want Action) actuator.NodeCheck {
	return func(fresh *v1.Node) (bool, string) {
		d := c.decidePod(fresh, *pv, c.now())
		return d.Action == want, d.Why
	}
}

// podCheck re-decides a force deletion on the fresh node and pod, with the
// attachers' heartbeats and CSIDrivers read again from the API server: a
// cache may still hold the heartbeat of an attacher that stopped.
func (c *Controller) podCheck(ctx context.Context, vols []podvolumes.Volume) actuator.PodCheck {
	return func(node *v1.Node, pod *v1.Pod) (bool, string) {
		attachers, err := c.freshAttachers(ctx, safeDrivers(vols))
		if err != nil {
			return false, err.Error()
		}
		d := c.decidePod(node, podVolumes{pod: pod, vols: vols, attachers: attachers}, c.now())
		return d.Action == Delete, d.Why
	}
}

// podsResult is what one pass over a node's pods found and did.
type podsResult struct {
	errs    []error
	requeue time.Duration
	// taintFor is the first pod that needs the node quarantined first.
	taintFor *podVolumes
	// inUse holds the CSI volumes that live pods on the node still use.
	inUse map[v1.UniqueVolumeName]bool
}

// handlePods decides for every pod on the node and force-deletes those that
// qualify.
func (c *Controller) handlePods(ctx context.Context, node *v1.Node, pods []*v1.Pod, now time.Time) podsResult {
	logger := klog.FromContext(ctx)
	r := podsResult{inUse: map[v1.UniqueVolumeName]bool{}}
	for _, pod := range pods {
		vols, err := c.resolver.PodVolumes(pod)
		if err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		deleted := false
		pv := podVolumes{pod, vols, c.cachedAttachers(safeDrivers(vols), now)}
		d := c.decidePod(node, pv, now)
		c.setRefusedNow(pod.UID, d.Action == Refuse)
		switch d.Action {
		case Wait:
			r.requeue = minAfter(r.requeue, d.After)
		case Refuse:
			c.reportRefusal(pod, d.Why)
		case TaintFirst:
			if r.taintFor == nil {
				r.taintFor = &pv
			}
		case Delete:
			trigger := nodequeue.Latest(nodeutil.NotReadySince(node).Add(c.delay), deletionRequested(pod))
			if err := c.recordIntents(ctx, node, vols, nil); err != nil {
				r.errs = append(r.errs, err)
			} else if err := c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonSafeDetach, Message: d.Why, Trigger: trigger, Recheck: c.podCheck(ctx, vols)}); err != nil {
				r.errs = append(r.errs, err)
			} else {
				deleted = true
			}
		default:
			logger.V(5).Info("Leaving pod alone", "pod", klog.KObj(pod), "why", d.Why)
		}
		if !deleted && !podutil.IsForceDeleted(pod) {
			for _, v := range vols {
				if v.Kind == podvolumes.KindCSI {
					r.inUse[v.UniqueName()] = true
				}
			}
		}
	}
	return r
}

func (c *Controller) maybeUntaint(ctx context.Context, in view.Objects) (time.Duration, error) {
	node := in.Node
	if !cutoff.IsQuarantined(node) {
		return 0, nil
	}
	decide := func(n *v1.Node, pods []*v1.Pod, vas []*storagev1.VolumeAttachment) (NodeDecision, error) {
		inUse, livePVs, err := c.liveVolumes(pods)
		if err != nil {
			return NodeDecision{}, err
		}
		return DecideUntaint(n, ReleasedVAs(vas, c.isSafeDriver, livePVs), len(UnusedSafeVolumes(n, c.isSafeDriver, inUse)), c.now(), c.liftDelay), nil
	}
	d, err := decide(node, in.Pods, in.VolumeAttachments)
	if err != nil {
		return 0, err
	}
	if !d.Untaint {
		klog.FromContext(ctx).V(4).Info("Keeping quarantine", "why", d.Why)
		return d.After, nil
	}
	return 0, c.act.RemoveTaint(ctx, node, quarantineTaint.Key, quarantineTaint.Effect, d.Why, func(fresh *v1.Node) (bool, string) {
		// Which pods stayed decides which VolumeAttachments count, and a
		// released one still there holds the quarantine: read both from
		// the API, a lagging cache may still hold a deleted pod or miss a
		// VolumeAttachment.
		fin, err := Gather(ctx, view.API{Client: c.act.Client}, fresh.Name)
		if err != nil {
			return false, err.Error()
		}
		fd, err := decide(fresh, fin.Pods, fin.VolumeAttachments)
		if err != nil {
			return false, err.Error()
		}
		return fd.Untaint, fd.Why
	})
}

// liveVolumes returns the CSI volumes (by unique name) and the PVs that the
// pods on the node which were not force-deleted use.
func (c *Controller) liveVolumes(pods []*v1.Pod) (inUse map[v1.UniqueVolumeName]bool, livePVs map[string]bool, err error) {
	inUse, livePVs = map[v1.UniqueVolumeName]bool{}, map[string]bool{}
	for _, pod := range pods {
		if podutil.IsForceDeleted(pod) {
			continue
		}
		vols, err := c.resolver.PodVolumes(pod)
		if err != nil {
			return nil, nil, err
		}
		for _, v := range vols {
			if v.PV != "" {
				livePVs[v.PV] = true
			}
			if v.Kind == podvolumes.KindCSI {
				inUse[v.UniqueName()] = true
			}
		}
	}
	return inUse, livePVs, nil
}

// setRefusedNow records whether the pod's latest decision was Refuse.
func (c *Controller) setRefusedNow(uid types.UID, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if refused {
		c.refusedNow[uid] = true
	} else {
		delete(c.refusedNow, uid)
	}
	c.metrics.setRefusedPods(len(c.refusedNow))
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
