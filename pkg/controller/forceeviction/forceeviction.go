package forceeviction

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/renewals"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "force-eviction"

// DefaultReadyGrace is the default --force-eviction-ready-grace: upstream's
// node-monitor grace period, the time the node controller takes to mark a
// dead node NotReady, and how recent a Lease renewal proves a live kubelet.
const DefaultReadyGrace = 50 * time.Second

// Controller force-evicts pods from tainted NotReady nodes.
type Controller struct {
	act        *actuator.Actuator
	readyGrace time.Duration
	now        func() time.Time
	nodes      corelisters.NodeLister
	pvcs       corelisters.PersistentVolumeClaimLister
	// cached is the controller's view of its caches, for Gather.
	cached view.View
	queue  *nodequeue.Queue
	clock  *nodequeue.TaintClock
	// renewed tells when each node Lease was seen renewed, on this
	// controller's clock.
	renewed *renewals.Tracker
}

// New wires the controller to the shared informers; leaseFactory must be
// restricted to the kube-node-lease namespace. Call it before the factories
// are started.
//
// Lease renewals (every node, every 10 s) enqueue nothing: a sync that finds
// a fresh Lease on a NotReady node looks again when that Lease would go
// stale, so the cost of a Lease event does not grow with the cluster.
func New(f, leaseFactory informers.SharedInformerFactory, act *actuator.Actuator, readyGrace time.Duration) (*Controller, error) {
	podInf, vaInf, err := nodeutil.NodeIndexedInformers(f)
	if err != nil {
		return nil, err
	}
	leaseInf := leaseFactory.Coordination().V1().Leases()
	renewed := renewals.NewTracker(time.Now)
	if _, err := leaseInf.Informer().AddEventHandler(renewed); err != nil {
		return nil, fmt.Errorf("adding the Lease renewal tracker: %w", err)
	}
	c := &Controller{
		act:        act,
		readyGrace: readyGrace,
		now:        time.Now,
		nodes:      f.Core().V1().Nodes().Lister(),
		pvcs:       f.Core().V1().PersistentVolumeClaims().Lister(),
		cached: view.Informers{Nodes: f.Core().V1().Nodes().Lister(), Leases: leaseInf.Lister().Leases(v1.NamespaceNodeLease),
			Pods: podInf.GetIndexer(), VAs: vaInf.GetIndexer()},
		clock:   nodequeue.NewTaintClock(names.ForceEvictionTaint),
		renewed: renewed,
	}
	f.Core().V1().PersistentVolumeClaims().Informer()
	c.queue = nodequeue.New(Name, c.sync)
	if err := nodequeue.AddHandler(f.Core().V1().Nodes().Informer(), "node", c.queue.ClockedNodeHandler(c.clock, func(old, cur *v1.Node) bool {
		return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
			cutoff.HasForceEvictionTaint(old) != cutoff.HasForceEvictionTaint(cur) ||
			old.Annotations[EvictedVolumesAnnotation] != cur.Annotations[EvictedVolumesAnnotation] ||
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

// observed returns the Lease as this controller observed it: its renewTime
// replaced by when the controller saw it change (renewals.Tracker), so that
// KubeletLiveness judges the kubelet by this machine's clock, never by the
// node's. A healthy node whose clock runs behind is not taken for dead; a
// Lease first seen after a restart counts as renewed then (the safe side).
// A Lease without renewTime stays without: no evidence of life.
func (c *Controller) observed(l *coordinationv1.Lease) *coordinationv1.Lease {
	if l == nil || l.Spec.RenewTime == nil {
		return l
	}
	o := c.renewed.Observe(l)
	out := l.DeepCopy()
	at := metav1.NewMicroTime(o.ObservedAt)
	out.Spec.RenewTime = &at
	return out
}

// freshLease reads the node's Lease from the API server for a write-time
// re-check.
func (c *Controller) freshLease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	l, err := nodeutil.ReadLease(ctx, c.act.Client, name)
	return c.observed(l), err
}

func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	node, err := nodeutil.Lookup(c.nodes, nodeName)
	if node == nil || err != nil {
		return 0, err
	}
	if !cutoff.HasForceEvictionTaint(node) && !ParseEvicted(node).Present {
		return 0, nil
	}
	in, err := Gather(ctx, c.cached, nodeName)
	if in.Node == nil || err != nil {
		return 0, err
	}
	lease := c.observed(in.Lease)
	remaining, deleted, err := c.evict(ctx, in.Node, lease, in.Pods)
	if err != nil {
		return 0, err
	}
	return c.syncNode(ctx, in, lease, remaining, c.livePVs(in.Pods, deleted))
}

// evict force-deletes the pods DecidePod selects, after recording their
// volumes on the node. It returns how many pods do not tolerate the taint
// and which it deleted.
func (c *Controller) evict(ctx context.Context, node *v1.Node, lease *coordinationv1.Lease, pods []*v1.Pod) (int, map[types.UID]bool, error) {
	logger := klog.FromContext(ctx)
	taint := evictionTaint(node)
	now := c.now()
	remaining := 0
	var todo []*v1.Pod
	var whys []string
	for _, pod := range pods {
		if taint == nil || podutil.ToleratesTaint(pod, taint) {
			continue
		}
		remaining++
		d := DecidePod(node, pod, lease, now, c.readyGrace)
		if !d.Delete {
			logger.V(5).Info("Not deleting pod", "pod", klog.KObj(pod), "why", d.Why)
			continue
		}
		todo, whys = append(todo, pod), append(whys, d.Why)
	}
	if len(todo) == 0 {
		return remaining, nil, nil
	}
	// The record goes first: a kubelet that returns mid-eviction must find
	// the taint kept for every volume of a pod that was deleted.
	if err := c.recordVolumes(ctx, node, todo); err != nil {
		return remaining, nil, err
	}
	if err := c.recordIntents(ctx, node, todo); err != nil {
		return remaining, nil, err
	}
	var errs []error
	deleted := map[types.UID]bool{}
	for i, pod := range todo {
		err := c.act.ForceDeletePod(ctx, pod, actuator.Deletion{Reason: metrics.ReasonForceEviction, Message: whys[i], Trigger: c.clock.Since(node.Name), Recheck: c.podCheck(ctx)})
		if err == nil {
			deleted[pod.UID] = true
			continue
		}
		errs = append(errs, err)
		if actuator.IsDecisionChanged(err) {
			break // the kubelet is back: stop evicting more pods
		}
	}
	return remaining, deleted, errors.Join(errs...)
}

// untoleratedPods counts the pods on node that do not tolerate its
// force-eviction taint and are not force-deleted already.
func untoleratedPods(node *v1.Node, pods []*v1.Pod) int {
	taint := evictionTaint(node)
	n := 0
	for _, pod := range pods {
		if taint != nil && !podutil.ToleratesTaint(pod, taint) && !podutil.IsForceDeleted(pod) {
			n++
		}
	}
	return n
}

// podCheck re-decides a deletion on the fresh node, pod and Lease.
func (c *Controller) podCheck(ctx context.Context) actuator.PodCheck {
	return func(node *v1.Node, pod *v1.Pod) (bool, string) {
		lease, err := c.freshLease(ctx, pod.Spec.NodeName)
		if err != nil {
			return false, err.Error()
		}
		d := DecidePod(node, pod, lease, c.now(), c.readyGrace)
		return d.Delete, d.Why
	}
}

// recordVolumes adds the PVs of the pods about to be deleted to the node's
// EvictedVolumesAnnotation, re-checking on the fresh node and Lease that
// the first of them may still be deleted.
func (c *Controller) recordVolumes(ctx context.Context, node *v1.Node, todo []*v1.Pod) error {
	var pvs []string
	all := false
	for _, pod := range todo {
		p, unknown := c.podPVs(pod)
		pvs, all = append(pvs, p...), all || unknown
	}
	if _, adds := ParseEvicted(node).With(pvs, all); !adds {
		return nil
	}
	check := c.podCheck(ctx)
	return c.act.UpdateNode(ctx, node, "record evicted volumes", func(fresh *v1.Node) (bool, string) {
		return check(fresh, todo[0])
	}, func(n *v1.Node) bool {
		rec, adds := ParseEvicted(n).With(pvs, all)
		if !adds {
			return false
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[EvictedVolumesAnnotation] = rec.String()
		return true
	})
}

// recordIntents writes the force-eviction fence intent on the
// VolumeAttachments of the pods about to be deleted (all of the node's when
// a volume cannot be matched by PV), before the first deletion: whatever
// the node looks like when an attacher gets to their detach, it fences.
func (c *Controller) recordIntents(ctx context.Context, node *v1.Node, todo []*v1.Pod) error {
	var pvs []string
	all := false
	for _, pod := range todo {
		p, unknown := c.podPVs(pod)
		pvs, all = append(pvs, p...), all || unknown
	}
	vas, err := c.cached.VolumeAttachmentsOnNode(ctx, node.Name)
	if err != nil {
		return err
	}
	return c.act.RecordIntent(ctx, actuator.Intent{Reason: cutoff.ReasonForceEviction, Controller: Name, Node: node, AllOfNode: all, PVs: pvs, Cached: vas})
}

// podPVs returns the PVs of the pod's claims; unknown is true when a
// volume may have a VolumeAttachment that cannot be matched by PV name.
func (c *Controller) podPVs(pod *v1.Pod) (pvs []string, unknown bool) {
	for _, vol := range pod.Spec.Volumes {
		src := vol.VolumeSource
		claim := ""
		switch {
		case src.PersistentVolumeClaim != nil:
			claim = src.PersistentVolumeClaim.ClaimName
		case src.Ephemeral != nil:
			claim = pod.Name + "-" + vol.Name
		case src.ConfigMap != nil, src.Secret != nil, src.DownwardAPI != nil, src.Projected != nil,
			src.EmptyDir != nil, src.HostPath != nil, src.CSI != nil:
			continue // no VolumeAttachment
		default:
			unknown = true // an in-tree volume may be attached without a PV
			continue
		}
		pvc, err := c.pvcs.PersistentVolumeClaims(pod.Namespace).Get(claim)
		switch {
		case err != nil:
			unknown = true
		case pvc.Spec.VolumeName != "":
			pvs = append(pvs, pvc.Spec.VolumeName)
		}
	}
	return pvs, unknown
}

// livePVs returns the PVs of the pods on the node that were not
// force-deleted, by an earlier sync (as the cache shows) or by this one
// (deleted, not in the cache yet).
func (c *Controller) livePVs(pods []*v1.Pod, deleted map[types.UID]bool) map[string]bool {
	live := map[string]bool{}
	for _, pod := range pods {
		if podutil.IsForceDeleted(pod) || deleted[pod.UID] {
			continue
		}
		pvs, _ := c.podPVs(pod)
		for _, pv := range pvs {
			live[pv] = true
		}
	}
	return live
}

// syncNode decides on the node itself and writes, re-checking on fresh
// data: the node the actuator read, and the Lease, pods and
// VolumeAttachments read from the API server.
func (c *Controller) syncNode(ctx context.Context, in view.Objects, lease *coordinationv1.Lease, remaining int, livePVs map[string]bool) (time.Duration, error) {
	node := in.Node
	since := c.clock.Since(node.Name)
	if since.IsZero() {
		since = c.now()
	}
	decide := func(n *v1.Node, l *coordinationv1.Lease, remaining int, vas []*storagev1.VolumeAttachment, livePVs map[string]bool) NodeDecision {
		ev := ParseEvicted(n)
		return DecideNode(NodeState{Node: n, Lease: l, Remaining: remaining, VAs: len(vas), Evicted: ev.Present, EvictedVAs: EvictedVAs(vas, ev, livePVs), TaintSince: since}, c.now(), c.readyGrace)
	}
	check := func(want func(NodeDecision) bool) actuator.NodeCheck {
		return func(fresh *v1.Node) (bool, string) {
			// Whether pods remain, and which evicted volumes still hold
			// the taint, depend on which pods and VolumeAttachments are
			// really on the node: ask the API, not the cache. The pod
			// watch may lag the node watch, and a taint removed for "no
			// pod left" is the operator's request lost.
			fin, err := Gather(ctx, view.API{Client: c.act.Client}, fresh.Name)
			if err != nil {
				return false, err.Error()
			}
			live := livePVs
			if ParseEvicted(fresh).Present {
				live = c.livePVs(fin.Pods, nil)
			}
			fd := decide(fresh, c.observed(fin.Lease), untoleratedPods(fresh, fin.Pods), fin.VolumeAttachments, live)
			return want(fd), fd.Why
		}
	}
	nd := decide(node, lease, remaining, in.VolumeAttachments, livePVs)
	switch {
	case nd.ReleaseVolumes:
		all := make([]v1.UniqueVolumeName, 0, len(node.Status.VolumesInUse)+len(node.Status.VolumesAttached))
		all = append(all, node.Status.VolumesInUse...)
		for _, a := range node.Status.VolumesAttached {
			all = append(all, a.Name)
		}
		_, err := c.act.ReleaseVolumes(ctx, node, all, true, nd.Why, check(func(d NodeDecision) bool { return d.ReleaseVolumes }))
		return 0, err
	case nd.Untaint:
		if err := c.act.RemoveTaint(ctx, node, names.ForceEvictionTaint, v1.TaintEffectNoExecute, nd.Why, check(func(d NodeDecision) bool { return d.Untaint })); err != nil {
			return 0, err
		}
	}
	if nd.ClearRecord {
		return 0, c.act.UpdateNode(ctx, node, "clear evicted volumes", check(func(d NodeDecision) bool { return d.ClearRecord }), func(n *v1.Node) bool {
			if _, ok := n.Annotations[EvictedVolumesAnnotation]; !ok {
				return false
			}
			delete(n.Annotations, EvictedVolumesAnnotation)
			return true
		})
	}
	klog.FromContext(ctx).V(4).Info("Force eviction node decision", "why", nd.Why)
	return nd.After, nil
}
