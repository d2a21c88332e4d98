// Package storagefence publishes the fences a CSI driver's storage enforces
// (its ListFences) as StorageFence objects, one per node ID, so that
// `kubectl fenceline` shows them the same way for every driver; and carries
// out an operator's request to lift them (LiftFence), only on the evidence
// DecideLift asks for.
//
// One loop serves two kinds of keys: listKey reads the storage's fences and
// makes the objects match (create, update, delete), every Interval and soon
// after each fenced detach; an object's name decides and carries out its
// lift request.
package storagefence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions/fencing/v1alpha1"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
)

// listKey is the key of the listing; every other key is an object's name.
const listKey = ""

// Events on StorageFence objects.
const (
	EventFenceLifted    = "FenceLifted"
	EventLiftWaiting    = "LiftWaiting"
	EventLiftFailed     = "LiftFailed"
	EventReported       = "StorageFenceReported"
	EventGone           = "StorageFenceGone"
	reasonLifting       = "Lifting"
	nodeNameIndex       = "fenceline-attacher/storagefence-node"
	csiNodeNodeIDIndex  = "fenceline-attacher/csinode-nodeid"
	afterDetachDebounce = 2 * time.Second
)

// Config wires the publisher.
type Config struct {
	// Driver is the CSI driver's name.
	Driver string
	// Conn reaches the driver; Caps is what it advertised.
	Conn grpc.ClientConnInterface
	Caps fence.Capabilities
	// Fencing writes the StorageFences; Kube reads Nodes, CSINodes and
	// VolumeAttachments fresh before a lift.
	Fencing versioned.Interface
	Kube    kubernetes.Interface
	// Recorder emits Events on the StorageFences.
	Recorder record.EventRecorder
	// Interval is how often the storage's fences are read.
	Interval time.Duration
	// Timeout bounds each CSI call.
	Timeout time.Duration
	// Now is the clock of the listTime and condition times; nil is
	// time.Now.
	Now func() time.Time
	// Metrics records the fenced nodes and the lifts; nil records nothing.
	Metrics *Metrics
}

// Controller is the publisher.
type Controller struct {
	cfg      Config
	loop     *keyloop.Loop[string]
	fences   fencinglisters.StorageFenceLister
	nodes    corelisters.NodeLister
	byNode   cache.Indexer
	csiNodes cache.Indexer
	synced   []cache.InformerSynced
}

// New returns a publisher over the StorageFence, Node and CSINode
// informers (it adds indexes to them: call before they start).
func New(cfg Config, sfs fencinginformers.StorageFenceInformer, nodes coreinformers.NodeInformer, csiNodes storageinformers.CSINodeInformer) (*Controller, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, fences: sfs.Lister(), nodes: nodes.Lister(), byNode: sfs.Informer().GetIndexer(), csiNodes: csiNodes.Informer().GetIndexer()}
	c.loop = keyloop.New(keyloop.Config{Name: "fenceline-attacher-storagefence", KeyName: "storageFence", RetryVerbosity: 2}, c.sync)
	if err := sfs.Informer().AddIndexers(cache.Indexers{nodeNameIndex: func(obj any) ([]string, error) {
		if sf, ok := obj.(*fencingv1alpha1.StorageFence); ok && sf.Status.NodeName != "" {
			return []string{sf.Status.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("index StorageFences by node: %w", err)
	}
	if err := csiNodes.Informer().AddIndexers(cache.Indexers{csiNodeNodeIDIndex: csiNodeIDs}); err != nil {
		return nil, fmt.Errorf("index CSINodes by node ID: %w", err)
	}
	if _, err := sfs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueLift,
		UpdateFunc: func(_, obj any) { c.enqueueLift(obj) },
	}); err != nil {
		return nil, err
	}
	// A node's change (Ready again, a taint gone, volumes unmounted) may
	// let a waiting lift go.
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { c.nodeChanged(obj) },
		DeleteFunc: c.nodeChanged,
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{sfs.Informer().HasSynced, nodes.Informer().HasSynced, csiNodes.Informer().HasSynced}
	return c, nil
}

func csiNodeIDs(obj any) ([]string, error) {
	n, ok := obj.(*storagev1.CSINode)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, d := range n.Spec.Drivers {
		out = append(out, d.Name+"\x00"+d.NodeID)
	}
	return out, nil
}

// FencedDetach asks for the fences to be read again soon: one was just
// set. Several detaches in a burst make one read.
func (c *Controller) FencedDetach() { c.loop.AddAfter(listKey, afterDetachDebounce) }

// Run reads the fences now and every Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	c.loop.Add(listKey)
	c.loop.Run(ctx, 1)
}

func (c *Controller) enqueueLift(obj any) {
	if sf, ok := obj.(*fencingv1alpha1.StorageFence); ok && sf.Spec.Driver == c.cfg.Driver && sf.Spec.Lift != nil {
		c.loop.Add(sf.Name)
	}
}

func (c *Controller) nodeChanged(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	n, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	objs, err := c.byNode.ByIndex(nodeNameIndex, n.Name)
	if err != nil {
		return
	}
	for _, o := range objs {
		c.enqueueLift(o)
	}
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	if key == listKey {
		return c.cfg.Interval, c.syncList(ctx)
	}
	return 0, c.syncLift(ctx, key)
}

// nodeName returns the node whose CSINode gives the driver nodeID, "" when
// none does (in the cache).
func (c *Controller) nodeName(nodeID string) string {
	objs, err := c.csiNodes.ByIndex(csiNodeNodeIDIndex, c.cfg.Driver+"\x00"+nodeID)
	if err != nil || len(objs) == 0 {
		return ""
	}
	return objs[0].(*storagev1.CSINode).Name
}

func (c *Controller) list(ctx context.Context, nodeID string) ([]*fencev1.Fence, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return fence.ListFences(ctx, c.cfg.Conn, c.cfg.Caps, &fencev1.ListFencesRequest{NodeId: nodeID})
}

// syncList makes the StorageFences match the storage's fences.
func (c *Controller) syncList(ctx context.Context) error {
	fences, err := c.list(ctx, "")
	if err != nil {
		return fmt.Errorf("read the storage's fences: %w", err)
	}
	byID := map[string][]*fencev1.Fence{}
	for _, f := range fences {
		byID[f.GetNodeId()] = append(byID[f.GetNodeId()], f)
	}
	existing, err := c.fences.List(labels.Everything())
	if err != nil {
		return err
	}
	mine := map[string]*fencingv1alpha1.StorageFence{}
	for _, sf := range existing {
		if sf.Spec.Driver == c.cfg.Driver {
			mine[sf.Name] = sf
		}
	}
	var errs []error
	for id, fs := range byID {
		name := ObjectName(c.cfg.Driver, id)
		errs = append(errs, c.publish(ctx, name, id, Report(c.nodeName(id), fs), mine[name]))
		delete(mine, name)
	}
	for _, sf := range mine {
		errs = append(errs, c.retire(ctx, sf))
	}
	c.cfg.Metrics.setFenced(len(byID))
	return errors.Join(errs...)
}

// publish creates or updates one StorageFence; it writes only when what the
// storage reports changed.
func (c *Controller) publish(ctx context.Context, name, nodeID string, report fencingv1alpha1.StorageFenceReport, cur *fencingv1alpha1.StorageFence) error {
	client := c.cfg.Fencing.FencingV1alpha1().StorageFences()
	if cur == nil {
		created, err := client.Create(ctx, &fencingv1alpha1.StorageFence{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       fencingv1alpha1.StorageFenceSpec{Driver: c.cfg.Driver, NodeID: nodeID},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache lags; the next read updates it
		}
		if err != nil {
			return fmt.Errorf("create StorageFence %s for node ID %q: %w", name, nodeID, err)
		}
		klog.FromContext(ctx).Info("Storage reports a fence", "storageFence", name, "nodeID", nodeID, "node", report.NodeName)
		c.cfg.Recorder.Eventf(created, v1.EventTypeNormal, EventReported, "The storage of driver %s fences node ID %q (node %s) off %s",
			c.cfg.Driver, nodeID, orNone(report.NodeName), report.FencedOff())
		cur = created
	}
	was := cur.Status
	was.ListTime, was.Conditions = nil, nil
	if equality.Semantic.DeepEqual(was, report) && cur.Status.ListTime != nil {
		return nil
	}
	next := cur.DeepCopy()
	now := metav1.NewTime(c.cfg.Now())
	report.ListTime, report.Conditions = &now, cur.Status.Conditions
	next.Status = report
	if _, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update StorageFence %s: %w", name, err)
	}
	return nil
}

// retire deletes the StorageFence of a node the storage no longer fences.
func (c *Controller) retire(ctx context.Context, sf *fencingv1alpha1.StorageFence) error {
	uid := sf.UID
	err := c.cfg.Fencing.FencingV1alpha1().StorageFences().Delete(ctx, sf.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete StorageFence %s: %w", sf.Name, err)
	}
	klog.FromContext(ctx).Info("Storage reports no fence any more", "storageFence", sf.Name, "nodeID", sf.Spec.NodeID, "node", sf.Status.NodeName)
	c.cfg.Recorder.Eventf(sf, v1.EventTypeNormal, EventGone, "The storage of driver %s no longer fences node ID %q (node %s)", c.cfg.Driver, sf.Spec.NodeID, orNone(sf.Status.NodeName))
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
