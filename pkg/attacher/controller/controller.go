// Package controller is the attacher's event-driven core, shaped like the
// kubernetes-csi sidecars: shared informers feed rate-limited work queues,
// and one sync per VolumeAttachment (or PersistentVolume) name drives the
// CSI driver toward the desired state. Decisions with safety impact are
// delegated to pure functions (see package fencing and needsDetach).
package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/csiclient"
	"fenceline.io/fenceline/pkg/attacher/metrics"
	"fenceline.io/fenceline/pkg/component/keyloop"
	"fenceline.io/fenceline/pkg/kube/freshread"
	"fenceline.io/fenceline/pkg/names"
)

// CSI is the part of the CSI driver the controller calls. In production it
// is *csiclient.Client.
type CSI interface {
	Publish(ctx context.Context, r csiclient.PublishRequest) (map[string]string, error)
	Unpublish(ctx context.Context, volumeID, nodeID string, secrets map[string]string, fenced bool) error
	PublishedNodes(ctx context.Context, maxEntries int32) (map[string][]string, error)
}

// Config configures a Controller.
type Config struct {
	// DriverName is the CSI driver name; VolumeAttachments with another
	// spec.attacher are ignored.
	DriverName string
	// Client writes VolumeAttachments, PVs and reads Secrets.
	Client kubernetes.Interface
	// RecordClient writes the fence records (fencing.Record) on
	// VolumeAttachments; nil means Client. A client of its own keeps the
	// one write a fenced detach adds from queueing behind the attaches and
	// detaches of a failover on --kube-api-qps; there is at most one per
	// fenced detach.
	RecordClient kubernetes.Interface
	// FailoverClient makes the writes and fresh reads of failover work
	// (see lane): a client of its own, with its own rate limiter, so that
	// routine attaches and detaches cannot use up its budget. Nil means
	// Client.
	FailoverClient kubernetes.Interface
	// ReadClient makes the fresh reads that confirm a plain detach
	// (freshNode, freshDriver): a client of its own, so that these reads,
	// which upstream does not make, never wait behind the attacher's writes
	// on --kube-api-qps nor slow them down. Nil means Client.
	ReadClient kubernetes.Interface
	// CSI is the driver connection.
	CSI CSI
	// Capabilities were discovered once at start-up.
	Capabilities csiclient.Capabilities
	// Timeout bounds every CSI call (--timeout).
	Timeout time.Duration
	// RetryIntervalStart and RetryIntervalMax bound the per-item
	// exponential backoff.
	RetryIntervalStart, RetryIntervalMax time.Duration
	// DefaultFSType is used when a PV has no fsType (--default-fstype).
	DefaultFSType string
	// ReconcileSync is the ListVolumes reconciler period; 0 disables it.
	ReconcileSync time.Duration
	// MaxEntries is ListVolumes' max_entries (--max-entries).
	MaxEntries int32
	// Recorder emits Kubernetes Events on VolumeAttachments and, for a
	// fenced detach, a failed detach or a refused one, on the claim bound
	// to the volume.
	Recorder record.EventRecorder
	// AttachEvents records a Normal Attached Event for every successful
	// attach and a Normal Detached Event for every plain detach
	// (--attach-events). Off by default, as upstream records none: the
	// attach/detach controller already records SuccessfulAttachVolume on
	// the pod, and each Event is a write to the API server. A fenced
	// detach and every failure are recorded whatever this says.
	AttachEvents bool
	// Metrics records detach outcomes; nil records nothing.
	Metrics *metrics.Recorder
	// DetachWorkers and FailoverWorkers are the worker counts of the
	// detach and failover lanes; 0 means Run's count, as for attaches.
	DetachWorkers, FailoverWorkers int
	// Blind is set when RBAC does not let the attacher read Nodes or
	// CSIDrivers (fencing.Blindness): no informer is started for them and
	// every detach not already recorded as fenced is plain, as upstream's.
	Blind bool
	// AfterFencedDetach, when set, is called after each fenced detach
	// (the storage fences published as StorageFences are read again).
	AfterFencedDetach func()
}

// backlogLogAfter is how long a VolumeAttachment may wait for a worker
// before its sync is logged at default verbosity, with the queue's depth:
// a backlog shows in the logs operators read, not only in metrics.
const backlogLogAfter = 30 * time.Second

// Index names on the VolumeAttachment informer.
const (
	vaByPVIndex   = "fenceline-attacher/pv"
	vaByNodeIndex = "fenceline-attacher/node"
)

// Controller attaches and detaches the VolumeAttachments of one driver.
type Controller struct {
	cfg       Config
	finalizer string

	vaLister        storagelisters.VolumeAttachmentLister
	vaIndexer       cache.Indexer
	pvLister        corelisters.PersistentVolumeLister
	nodeLister      corelisters.NodeLister
	csiNodeLister   storagelisters.CSINodeLister
	csiDriverLister storagelisters.CSIDriverLister
	synced          []cache.InformerSynced

	vaQueue vaLanes
	pvQueue *keyloop.Loop[string]

	track tracker
	moves volumeMoves

	// nodeReads and driverReads share the fresh reads that confirm plain
	// detaches (freshNode, freshDriver).
	nodeReads   freshread.Group[*v1.Node]
	driverReads freshread.Group[*storagev1.CSIDriver]
}

// New wires a Controller to the informers of factory. Call factory.Start
// after New and before Run.
func New(cfg Config, factory informers.SharedInformerFactory) (*Controller, error) {
	if cfg.DriverName == "" || cfg.Client == nil || cfg.CSI == nil || cfg.Recorder == nil {
		return nil, errors.New("controller config needs DriverName, Client, CSI and Recorder")
	}
	if cfg.RetryIntervalStart <= 0 || cfg.RetryIntervalMax < cfg.RetryIntervalStart {
		return nil, fmt.Errorf("invalid retry intervals: start %v, max %v", cfg.RetryIntervalStart, cfg.RetryIntervalMax)
	}
	if cfg.RecordClient == nil {
		cfg.RecordClient = cfg.Client
	}
	if cfg.FailoverClient == nil {
		cfg.FailoverClient = cfg.Client
	}
	if cfg.ReadClient == nil {
		cfg.ReadClient = cfg.Client
	}
	c := &Controller{
		cfg:       cfg,
		finalizer: names.AttacherFinalizer(cfg.DriverName),
		track:     newTracker(),
	}
	// The queues keep upstream's names (their workqueue metrics) and
	// backoff; a failed sync is logged at V(2) only: it already reports
	// itself in the VolumeAttachment's status and an Event.
	newLoop := func(name string, sync func(context.Context, string) error) *keyloop.Loop[string] {
		return keyloop.New(keyloop.Config{Name: name, BaseDelay: cfg.RetryIntervalStart, MaxDelay: cfg.RetryIntervalMax, RetryVerbosity: 2, SlowWait: backlogLogAfter},
			func(ctx context.Context, key string) (time.Duration, error) { return 0, sync(ctx, key) })
	}
	for l := range laneCount {
		c.vaQueue.loops[l] = newLoop(l.String(), func(ctx context.Context, name string) error {
			defer c.vaQueue.locks.lock(name)()
			return c.syncVA(context.WithValue(ctx, laneKey{}, l), name)
		})
	}
	c.pvQueue = newLoop("csi-attacher-pv", c.syncPV)

	vaInformer := factory.Storage().V1().VolumeAttachments()
	if err := vaInformer.Informer().AddIndexers(cache.Indexers{
		vaByPVIndex:   c.indexByPV,
		vaByNodeIndex: c.indexByNode,
	}); err != nil {
		return nil, fmt.Errorf("add VolumeAttachment indexers: %w", err)
	}
	c.vaLister = vaInformer.Lister()
	c.vaIndexer = vaInformer.Informer().GetIndexer()
	pvInformer := factory.Core().V1().PersistentVolumes()
	c.pvLister = pvInformer.Lister()
	csiNodeInformer := factory.Storage().V1().CSINodes()
	c.csiNodeLister = csiNodeInformer.Lister()

	type handler struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}
	handlers := []handler{
		{vaInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.vaAdded, UpdateFunc: c.vaUpdated, DeleteFunc: c.vaDeleted}},
		{pvInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.pvAdded, UpdateFunc: func(_, n any) { c.pvAdded(n) }}},
		{csiNodeInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.csiNodeChanged, UpdateFunc: func(_, n any) { c.csiNodeChanged(n) }}},
	}
	// A blind attacher starts no informer it may not list: its cache would
	// never sync, and nothing would be attached at all.
	if !cfg.Blind {
		nodeInformer := factory.Core().V1().Nodes()
		c.nodeLister = nodeInformer.Lister()
		csiDriverInformer := factory.Storage().V1().CSIDrivers()
		c.csiDriverLister = csiDriverInformer.Lister()
		handlers = append(handlers,
			handler{nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: c.nodeUpdated, DeleteFunc: c.nodeDeleted}},
			handler{csiDriverInformer.Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: c.csiDriverUpdated}})
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

// Run waits for the caches, starts workers for each queue and the
// reconciler, and blocks until ctx is done and every worker has stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.vaQueue.ShutDown()
	defer c.pvQueue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting attacher controller", "driver", c.cfg.DriverName, "fenceCapable", c.cfg.Capabilities.Fence.UnpublishFence, "blind", c.cfg.Blind)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		// Only the end of ctx stops the wait: a signal is a clean stop.
		logger.Info("Stopped before the informer caches synced")
		return nil
	}
	var wg sync.WaitGroup
	laneWorkers := [laneCount]int{laneAttach: workers, laneDetach: c.cfg.DetachWorkers, laneFailover: c.cfg.FailoverWorkers}
	for l, loop := range c.vaQueue.loops {
		wg.Go(func() { loop.Run(ctx, cmp.Or(laneWorkers[l], workers)) })
	}
	wg.Go(func() { c.pvQueue.Run(ctx, workers) })
	if c.cfg.ReconcileSync > 0 && c.cfg.Capabilities.NeedsAttach() && c.cfg.Capabilities.ListVolumesPublishedNodes {
		wg.Go(func() { wait.UntilWithContext(ctx, c.reconcile, c.cfg.ReconcileSync) })
	}
	wg.Wait()
	logger.Info("Stopped attacher controller")
	return nil
}

// ours reports whether a VolumeAttachment belongs to this attacher.
func (c *Controller) ours(va *storagev1.VolumeAttachment) bool {
	return va != nil && va.Spec.Attacher == c.cfg.DriverName
}

func (c *Controller) indexByPV(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || !c.ours(va) || va.Spec.Source.PersistentVolumeName == nil {
		return nil, nil
	}
	return []string{*va.Spec.Source.PersistentVolumeName}, nil
}

func (c *Controller) indexByNode(obj any) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || !c.ours(va) {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// vasByIndex returns this driver's VolumeAttachments under an index value.
func (c *Controller) vasByIndex(index, value string) []*storagev1.VolumeAttachment {
	objs, err := c.vaIndexer.ByIndex(index, value)
	if err != nil {
		return nil
	}
	out := make([]*storagev1.VolumeAttachment, 0, len(objs))
	for _, o := range objs {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			out = append(out, va)
		}
	}
	return out
}

// csiDriver returns the driver's CSIDriver object, nil when there is none.
func (c *Controller) csiDriver() *storagev1.CSIDriver {
	if c.csiDriverLister == nil {
		return nil
	}
	d, err := c.csiDriverLister.Get(c.cfg.DriverName)
	if err != nil {
		return nil
	}
	return d
}

// nodeID finds the CSI node ID the reconciler checks: the node's current
// CSINode entry, or the annotation written at attach time when the CSINode
// (or the node) is gone, as upstream's reconciler does. Attach uses the
// CSINode only (attachNodeID); detach has its own order
// (fencing.DetachNodeID).
func (c *Controller) nodeID(va *storagev1.VolumeAttachment) (string, error) {
	if id := c.csiNodeID(va.Spec.NodeName); id != "" {
		return id, nil
	}
	if id := va.Annotations[names.NodeIDAnnotation]; id != "" {
		return id, nil
	}
	return "", fmt.Errorf("node %q: no CSINode entry for driver %s and no %s annotation", va.Spec.NodeName, c.cfg.DriverName, names.NodeIDAnnotation)
}

// csiNode returns the node's cached CSINode, nil when there is none.
func (c *Controller) csiNode(nodeName string) *storagev1.CSINode {
	csiNode, err := c.csiNodeLister.Get(nodeName)
	if err != nil {
		return nil
	}
	return csiNode
}

// csiNodeID returns the driver's node ID in the node's cached CSINode, or
// "" when there is none.
func (c *Controller) csiNodeID(nodeName string) string {
	csiNode := c.csiNode(nodeName)
	if csiNode == nil {
		return ""
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == c.cfg.DriverName {
			return d.NodeID
		}
	}
	return ""
}
