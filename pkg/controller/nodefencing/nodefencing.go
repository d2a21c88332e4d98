// Package nodefencing is fenceline-controller's node-fencing controller:
// it turns a node that stopped renewing its Lease into a FencingRequest,
// admits it through the storm guard, waits for fenceline-fence-agent to
// prove a power-off (read back Off), puts the node out of service, and
// unfences it once it is back with a new boot ID and nothing of its old
// boot holds a volume. docs/fencing.md has the state table; Decide is its
// single statement in code. The controller holds no credentials and never
// talks to a fencing device.
package nodefencing

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/renewals"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name for --controllers.
const Name = "node-fencing"

// requestNodeIndex indexes FencingRequests by spec.nodeName.
const requestNodeIndex = "spec.nodeName"

var (
	ownerAnnotation   = names.OutOfServiceOwnerAnnotation
	outOfServiceTaint = v1.Taint{Key: names.OutOfServiceTaint, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}
	triagedTaint      = v1.Taint{Key: names.FencingTriagedTaint, Effect: names.FencingTriagedTaintEffect}
	requiredTaint     = v1.Taint{Key: names.FencingRequiredTaint, Effect: names.FencingRequiredTaintEffect}
)

// Config is what New needs.
type Config struct {
	// Informers are the shared informers, NodeLeases those of
	// kube-node-lease, Fencing those of the fencing API.
	Informers, NodeLeases informers.SharedInformerFactory
	Fencing               fencinginformers.SharedInformerFactory
	// Client writes FencingRequests (JSON content type).
	Client versioned.Interface
	// Actuator writes Nodes and records their Events.
	Actuator *actuator.Actuator
	// Recorder records Events on FencingRequests.
	Recorder record.EventRecorder
	// Metrics are node-fencing's own; nil records none.
	Metrics *Metrics
	// Dynamic and Discovery read and write csi-addons NetworkFences (the
	// storage fence method NetworkFence); without Dynamic, none is read.
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// LifecycleConditions publishes the fence state as the Node lifecycle
	// conditions of KEP-5683 (LifecycleConditions) with every write of
	// the fencing conditions.
	LifecycleConditions bool
}

// Controller runs the node-fencing lifecycle, one node per sync.
type Controller struct {
	cfg      Config
	now      func() time.Time
	nodes    corelisters.NodeLister
	leases   coordinationlisters.LeaseNamespaceLister
	policies fencinglisters.FencePolicyLister
	classes  fencinglisters.FenceClassLister
	requests cache.Indexer
	vas      cache.Indexer
	// cached and fencingCached are the controller's views of its caches,
	// for Gather.
	cached        view.View
	fencingCached view.Fencing
	queue         *nodequeue.Queue
	// renewals is when each node Lease was seen renewed, on the
	// controller's clock (detect.Renewal).
	renewals *renewals.Tracker
	// life counts the signs of life of fenced nodes (JudgeFence).
	life *lifeWatch
	// storage remembers the fenced detaches of each node (reportStorage).
	storage *storageWatch
	// netFences reads NetworkFences from caches started when first needed,
	// netFencesAPI reads them fresh, netFenceWriter writes them; all nil
	// without a dynamic client.
	netFences      *networkfence.Informers
	netFencesAPI   networkfence.Reader
	netFenceWriter *networkfence.Writer

	// admitMu serialises admissions, so that two workers never both see a
	// free concurrency slot; guards holds each policy's storm-guard state.
	admitMu sync.Mutex
	// admissions counts the admissions made (admitOn), each counted as it
	// ends: reads made between two equal counts saw every admission.
	admissions atomic.Uint64
	// written holds the request versions this controller's status writes
	// replaced, until the cache catches up (see superseded).
	written superseded
	// creations holds the requests this controller created, until the
	// cache shows them (see created).
	creations created
	guards    map[string]guardState

	// pausedMu guards paused: the nodes whose fence a paused policy holds
	// now, each said once with an Event.
	pausedMu sync.Mutex
	paused   map[string]bool
}

// guardState is one policy's token bucket and storm state.
type guardState struct {
	bucket stormguard.Bucket
	storm  stormguard.Storm
}

// New wires the controller to the informers; call it before they start.
func New(cfg Config) (*Controller, error) {
	_, vaInf, err := nodeutil.NodeIndexedInformers(cfg.Informers)
	if err != nil {
		return nil, err
	}
	leaseInf := cfg.NodeLeases.Coordination().V1().Leases()
	fv := cfg.Fencing.Fencing().V1alpha1()
	reqInf := fv.FencingRequests().Informer()
	if err := reqInf.AddIndexers(cache.Indexers{requestNodeIndex: func(obj any) ([]string, error) {
		if r, ok := obj.(*fencingv1alpha1.FencingRequest); ok {
			return []string{r.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("adding FencingRequest index: %w", err)
	}
	c := &Controller{
		cfg:      cfg,
		now:      time.Now,
		nodes:    cfg.Informers.Core().V1().Nodes().Lister(),
		leases:   leaseInf.Lister().Leases(v1.NamespaceNodeLease),
		policies: fv.FencePolicies().Lister(),
		classes:  fv.FenceClasses().Lister(),
		requests: reqInf.GetIndexer(),
		vas:      vaInf.GetIndexer(),
		guards:   map[string]guardState{},
		paused:   map[string]bool{},
	}
	c.cached = view.Informers{Nodes: c.nodes, Leases: c.leases, VAs: vaInf.GetIndexer()}
	c.fencingCached = view.FencingInformers{Requests: c.requests, RequestsByNode: requestNodeIndex, Policies: c.policies, Classes: c.classes, Targets: fv.FenceTargets().Lister()}
	c.queue = nodequeue.New(Name, c.sync)
	if cfg.Dynamic != nil {
		c.netFences = &networkfence.Informers{Client: cfg.Dynamic, Discovery: cfg.Discovery, OnFence: c.queue.Enqueue}
		c.netFencesAPI = networkfence.API{Client: cfg.Dynamic}
		c.netFenceWriter = &networkfence.Writer{Client: cfg.Dynamic}
	}
	c.renewals = renewals.NewTracker(func() time.Time { return c.now() })
	if _, err := leaseInf.Informer().AddEventHandler(c.renewals); err != nil {
		return nil, fmt.Errorf("adding node Lease renewal handler: %w", err)
	}
	if err := c.watchLife(leaseInf.Informer(), cfg.Informers.Core().V1().Nodes().Informer()); err != nil {
		return nil, err
	}
	if err := c.watchStorage(vaInf); err != nil {
		return nil, err
	}
	if err := nodequeue.AddHandler(leaseInf.Informer(), "Lease (created or deleted)", leaseAppears(c.queue.Enqueue)); err != nil {
		return nil, err
	}
	return c, c.addHandlers(vaInf, reqInf)
}

func (c *Controller) addHandlers(vaInf, reqInf cache.SharedIndexInformer) error {
	nodeInf := c.cfg.Informers.Core().V1().Nodes().Informer()
	if err := nodequeue.AddHandler(nodeInf, "node", c.queue.NodeHandler(nodeChanged)); err != nil {
		return err
	}
	if err := nodequeue.AddHandler(vaInf, "VolumeAttachment", c.queue.VAHandler()); err != nil {
		return err
	}
	if err := nodequeue.AddHandler(reqInf, "FencingRequest", cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueRequest(obj) },
		UpdateFunc: func(_, obj any) { c.enqueueRequest(obj) },
		DeleteFunc: func(obj any) { c.enqueueRequest(obj) },
	}); err != nil {
		return err
	}
	// A policy or class change may change any node's decision; they are
	// rare, so every node is looked at again.
	all := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		UpdateFunc: func(any, any) { c.enqueueAll() },
		DeleteFunc: func(any) { c.enqueueAll() },
	}
	fv := c.cfg.Fencing.Fencing().V1alpha1()
	// A write of a policy's status (the storm guard's state, fence-
	// coverage's finding) changes no decision: the guard's state is read
	// fresh from the API when first needed, never from this cache.
	if err := nodequeue.AddHandler(fv.FencePolicies().Informer(), "FencePolicy", cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		UpdateFunc: func(old, cur any) { policySpecChanged(old, cur, c.enqueueAll) },
		DeleteFunc: func(any) { c.enqueueAll() },
	}); err != nil {
		return err
	}
	if err := nodequeue.AddHandler(fv.FenceClasses().Informer(), "FenceClass", all); err != nil {
		return err
	}
	// A FenceTarget is named after its node. Its creation or removal
	// changes whether a power check can be asked; an answer to one brings
	// the node back to its decision at once. The probe's other writes do
	// not.
	return nodequeue.AddHandler(fv.FenceTargets().Informer(), "FenceTarget", cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueTarget(obj) },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*fencingv1alpha1.FenceTarget)
			n, ok2 := cur.(*fencingv1alpha1.FenceTarget)
			if ok1 && ok2 && powerCheckAnswered(o, n) {
				c.queue.Enqueue(n.Name)
			}
		},
		DeleteFunc: func(obj any) { c.enqueueTarget(obj) },
	})
}

func (c *Controller) enqueueTarget(obj any) {
	if t, ok := nodequeue.DeletedObject[*fencingv1alpha1.FenceTarget](obj); ok {
		c.queue.Enqueue(t.Name)
	}
}

// leaseAppears enqueues a node whose Lease is created or deleted. A node
// without a Lease is never a candidate by it and its decision returns no
// recheck, and no renewal enqueues an unfenced node: without this, a
// kubelet that creates its Lease after the node's last event (a node that
// registered just before) would be looked at again only at its next Node
// event, which for a node that dies is kube-controller-manager marking it
// NotReady, 40-50 s later. Renewals themselves are not needed: the
// recheck of each decision follows them.
func leaseAppears(enqueue func(string)) cache.ResourceEventHandler {
	on := func(obj any) {
		if l, ok := nodequeue.DeletedObject[*coordinationv1.Lease](obj); ok && l.Namespace == v1.NamespaceNodeLease {
			enqueue(l.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: on, DeleteFunc: on}
}

// policySpecChanged calls enqueue unless cur is old with only its status
// changed (same generation, labels and annotations).
func policySpecChanged(old, cur any, enqueue func()) {
	o, ok1 := old.(*fencingv1alpha1.FencePolicy)
	n, ok2 := cur.(*fencingv1alpha1.FencePolicy)
	if ok1 && ok2 && o.Generation == n.Generation && o.Generation != 0 &&
		maps.Equal(o.Labels, n.Labels) && maps.Equal(o.Annotations, n.Annotations) {
		return
	}
	enqueue()
}

// nodeChanged filters the node updates that matter: readiness, boot ID,
// labels (policy selection), taints, conditions, volumes in use, and an
// operator's unfence ask on the node. A kubelet's heartbeat of an unchanged
// status is not one of them.
func nodeChanged(old, cur *v1.Node) bool {
	return nodeutil.IsReady(old) != nodeutil.IsReady(cur) ||
		old.Status.NodeInfo.BootID != cur.Status.NodeInfo.BootID ||
		!labels.Equals(old.Labels, cur.Labels) ||
		len(old.Spec.Taints) != len(cur.Spec.Taints) ||
		len(old.Status.VolumesInUse) != len(cur.Status.VolumesInUse) ||
		old.Annotations[ownerAnnotation] != cur.Annotations[ownerAnnotation] ||
		AskOf(old.Annotations) != AskOf(cur.Annotations) ||
		!conditionsEqual(old.Status.Conditions, cur.Status.Conditions)
}

func conditionsEqual(a, b []v1.NodeCondition) bool {
	return slices.EqualFunc(a, b, func(x, y v1.NodeCondition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.LastTransitionTime.Equal(&y.LastTransitionTime)
	})
}

func (c *Controller) enqueueRequest(obj any) {
	if r, ok := nodequeue.DeletedObject[*fencingv1alpha1.FencingRequest](obj); ok {
		c.queue.Enqueue(r.Spec.NodeName)
	}
}

func (c *Controller) enqueueAll() {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	for _, n := range nodes {
		c.queue.Enqueue(n.Name)
	}
}

// staleRequestRecheck is when a node whose cached request this
// controller's write replaced is looked at again if no event comes first.
const staleRequestRecheck = 2 * time.Second

// Run processes nodes until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if c.netFences != nil {
		c.netFences.Start(ctx)
	}
	c.queue.Run(ctx, workers)
}

// Sync runs one sync of the node, for tests.
func (c *Controller) Sync(ctx context.Context, nodeName string) (time.Duration, error) {
	return c.sync(ctx, nodeName)
}

// sync gathers the node's inputs from the caches, decides, and acts.
func (c *Controller) sync(ctx context.Context, nodeName string) (time.Duration, error) {
	in, err := c.gather(nodeName, nil)
	if err != nil {
		return 0, err
	}
	if c.written.stale(in.Request) {
		// Our own status write replaced this version: its update event
		// brings the node back; the recheck is a net under it.
		klog.FromContext(ctx).V(4).Info("Cached FencingRequest is a version this controller replaced; waiting for the cache", "request", in.Request.Name, "resourceVersion", in.Request.ResourceVersion)
		return staleRequestRecheck, nil
	}
	if c.creations.pending(nodeName, c.now(), c.requestsOf) {
		klog.FromContext(ctx).V(4).Info("The cache does not show the FencingRequest this controller created yet; waiting for it")
		return staleRequestRecheck, nil
	}
	// A node left with a failed request's marks is reported as failed
	// until they are cleared, not only while the request exists: deleting
	// the request does not make the node schedulable again.
	c.cfg.Metrics.SetNodeFencing(nodeName, fencedSince(in.Request), in.Blocked != "" || LeftMarks(in))
	if err := c.cancelDuplicates(ctx, nodeName, in.Request); err != nil {
		return 0, err
	}
	if err := c.reportLie(ctx, in); err != nil {
		return 0, err
	}
	d := Decide(in)
	after, err := c.act(ctx, in, d)
	if err != nil {
		return after, err
	}
	return after, c.reportStorage(ctx, in)
}

// cancelDuplicates cancels every open request of the node other than the
// one the controller follows (the oldest) that was not admitted yet: two
// open requests can exist when a human adds one, or when a create's answer
// was lost and it was retried. One that is already fencing is left to
// finish; the oldest is followed either way.
func (c *Controller) cancelDuplicates(ctx context.Context, nodeName string, open *fencingv1alpha1.FencingRequest) error {
	if open == nil {
		return nil
	}
	reqs, err := c.requestsOf(nodeName)
	if err != nil {
		return err
	}
	for _, r := range reqs {
		if r.UID == open.UID || fencingreq.Terminal(r.Status.Phase) {
			continue
		}
		d := Decision{Step: StepCancel, Reason: ReasonDuplicate, Why: fmt.Sprintf("FencingRequest %s is the node's open request", open.Name)}
		if err := c.transition(ctx, r, fencingv1alpha1.FencingPhaseCancelled, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
			s.CompletionTime = &now
			setCondition(s, fencingv1alpha1.FencingRequestTriaged, metav1.ConditionFalse, d.Reason, d.Why, now)
		}, phases(fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged), EventCancelled); err != nil {
			return err
		}
	}
	return nil
}

// gather reads the node's inputs from the caches (Gather), with the signs
// of life the controller observed. A non-nil fresh node replaces the
// cached one.
func (c *Controller) gather(nodeName string, fresh *v1.Node) (Input, error) {
	ctx := context.Background() // the caches do not block
	v := c.cached
	if fresh != nil {
		v = withNode{View: c.cached, node: fresh}
	}
	in, err := Gather(ctx, v, c.fencingCached, c.netReader(), nodeName, c.now(), c.observation)
	if err != nil {
		return in, err
	}
	in.Signs = c.life.signs(nodeName, in.Request, in.Lease, in.Node)
	return in, nil
}

// netReader is the cached NetworkFence reader, nil without one.
func (c *Controller) netReader() networkfence.Reader {
	if c.netFences == nil {
		return nil
	}
	return c.netFences
}

// resolve fills the policy of the input's node or request from the caches.
func (c *Controller) resolve(in *Input) error {
	return resolve(context.Background(), c.fencingCached, in)
}

func (c *Controller) lease(name string) (*coordinationv1.Lease, error) {
	return nodeutil.LookupLease(c.leases, name)
}

func (c *Controller) requestsOf(nodeName string) ([]*fencingv1alpha1.FencingRequest, error) {
	return c.fencingCached.FencingRequestsOf(context.Background(), nodeName)
}

// openRequest returns the node's oldest open request, and, when there is
// none, why no new one may be created: a request of the node's current boot
// Failed, and its marks were not cleared since (a cleared one was dealt
// with). The oldest wins so that every replica and every restart picks the
// same one.
func openRequest(reqs []*fencingv1alpha1.FencingRequest, node *v1.Node) (*fencingv1alpha1.FencingRequest, string) {
	slices.SortFunc(reqs, func(a, b *fencingv1alpha1.FencingRequest) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	blocked := ""
	for _, r := range reqs {
		if !fencingreq.Terminal(r.Status.Phase) {
			return r, ""
		}
		if r.Status.Phase == fencingv1alpha1.FencingPhaseFailed && sameBoot(r, node) && !cleared(r) {
			blocked = fmt.Sprintf("FencingRequest %s failed for the node's current boot; delete it to try again", r.Name)
		}
	}
	return nil, blocked
}

// sameBoot reports whether the failed request was about the node as it is
// now: same UID (when recorded) and same boot ID (an unknown one counts as
// the same, the safe reading).
func sameBoot(r *fencingv1alpha1.FencingRequest, node *v1.Node) bool {
	if node == nil {
		return true
	}
	if r.Spec.NodeUID != "" && r.Spec.NodeUID != node.UID {
		return false
	}
	return r.Status.BootIDAtFence == "" || r.Status.BootIDAtFence == node.Status.NodeInfo.BootID
}

// fencedSince is when the open request r verified the node's fence, zero
// when r is nil or has not fenced it (yet).
func fencedSince(r *fencingv1alpha1.FencingRequest) time.Time {
	if r == nil || r.Status.FencedTime == nil {
		return time.Time{}
	}
	switch r.Status.Phase {
	case fencingv1alpha1.FencingPhaseFenced, fencingv1alpha1.FencingPhaseRecovering:
		return r.Status.FencedTime.Time
	}
	return time.Time{}
}
