package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"path/filepath"
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/mock-driver/client"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
)

// volKey names a volume on the node: handles are a driver's own, so two
// drivers may use the same one.
type volKey struct{ driver, handle string }

// volume is the node-side state of one CSI volume.
type volume struct {
	driver    *nodeDriver
	handle    string
	pv        string
	published bool
	// rebooted marks a volume that was in use before the last power on; if
	// its pods are gone, its clean-up is forced.
	rebooted bool
	// unpublished marks a volume whose NodeUnpublishVolume succeeded in
	// its clean-up, which may still have to unstage it.
	unpublished bool
	stopWriter  context.CancelFunc
	// sess is the node's iSCSI session to a volume of the tgt backend,
	// from staging until its writer stops; nil for the memory backend.
	sess *session
}

// want is one volume the node's pods need.
type want struct {
	pv   string
	pods []*corev1.Pod
}

const vaByPVAndNode = "pvAndNode"

// caches are the informer caches of one powered-on period.
type caches struct {
	pods    corelisters.PodLister
	pvcs    corelisters.PersistentVolumeClaimLister
	pvs     corelisters.PersistentVolumeLister
	vas     cache.Indexer
	drivers storagelisters.CSIDriverLister
	// nodes holds this node only: the kubelet reads the attach/detach
	// controller's node.status.volumesAttached before it mounts.
	nodes corelisters.NodeLister
}

// attachable reports whether the driver's volumes go through an attach
// step, as the kubelet's CSI plugin decides it (CanAttach): unless the
// CSIDriver object exists and says attachRequired: false.
func attachable(drivers storagelisters.CSIDriverLister, driver string) bool {
	d, err := drivers.Get(driver)
	if err != nil || d.Spec.AttachRequired == nil {
		return true
	}
	return *d.Spec.AttachRequired
}

func vaKey(pv, node string) string { return pv + "/" + node }

// startAPILocked starts the informers of one powered-on period and the
// reconcile loop; done is closed when both stopped after ctx ends.
func (k *Kubelet) startAPILocked(ctx context.Context, done chan struct{}) error {
	podFactory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
		}))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.cfg.NodeName).String()
		}))
	factory := informers.NewSharedInformerFactory(k.cfg.Client, 0)
	pods := podFactory.Core().V1().Pods()
	nodes := nodeFactory.Core().V1().Nodes()
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	vas := factory.Storage().V1().VolumeAttachments()
	drivers := factory.Storage().V1().CSIDrivers()
	if err := vas.Informer().AddIndexers(cache.Indexers{vaByPVAndNode: func(obj any) ([]string, error) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok || va.Spec.Source.PersistentVolumeName == nil {
			return nil, nil
		}
		return []string{vaKey(*va.Spec.Source.PersistentVolumeName, va.Spec.NodeName)}, nil
	}}); err != nil {
		return fmt.Errorf("kubelet stand-in %s: %w", k.cfg.NodeName, err)
	}
	kick := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(kick) },
		UpdateFunc: func(any, any) { trigger(kick) },
		DeleteFunc: func(any) { trigger(kick) },
	}
	// Claims and volumes kick too: a claim bound after its pod arrived
	// makes the volume wanted.
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), pvcs.Informer(), pvs.Informer(), vas.Informer(), drivers.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(notify); err != nil {
			return fmt.Errorf("kubelet stand-in %s: %w", k.cfg.NodeName, err)
		}
	}
	c := caches{pods: pods.Lister(), pvcs: pvcs.Lister(), pvs: pvs.Lister(), vas: vas.Informer().GetIndexer(), drivers: drivers.Lister(), nodes: nodes.Lister()}
	podFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	factory.Start(ctx.Done())
	go func() {
		defer close(done)
		defer factory.Shutdown()
		defer nodeFactory.Shutdown()
		defer podFactory.Shutdown()
		if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, pvcs.Informer().HasSynced, pvs.Informer().HasSynced, vas.Informer().HasSynced, drivers.Informer().HasSynced, nodes.Informer().HasSynced) {
			return
		}
		tick := time.NewTicker(k.cfg.ResyncInterval)
		defer tick.Stop()
		for {
			if err := k.reconcile(ctx, c); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Kubelet stand-in reconcile failed; retrying")
			}
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-tick.C:
			}
		}
	}()
	return nil
}

func trigger(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// reconcile brings the node's volumes in line with its pods: mounted
// volumes are reported in use before they are staged and stay reported
// until they are unstaged, as a kubelet does so that the attach/detach
// controller never detaches a mounted volume without the out-of-service
// taint.
func (k *Kubelet) reconcile(ctx context.Context, c caches) error {
	logger := klog.FromContext(ctx)
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	// A shutting-down kubelet admits no new pod: it neither reports nor
	// mounts their volumes.
	pods = k.admit(ctx, pods)
	wanted, err := k.wantedVolumes(c, pods)
	if err != nil {
		return err
	}
	k.mu.Lock()
	for _, d := range k.drivers {
		d.noAttach = !attachable(c.drivers, d.name)
	}
	k.mu.Unlock()
	// Report in use what is wanted or still mounted.
	if err := k.reportInUse(ctx, wanted); err != nil {
		return err
	}
	var errs []error
	for key, w := range wanted {
		if err := k.mount(ctx, key, w, c); err != nil {
			errs = append(errs, err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err() // powered off mid-way: the node no longer acts on what it saw
	}
	k.mu.Lock()
	var gone []*volume
	for key, v := range k.vols {
		if _, ok := wanted[key]; !ok {
			gone = append(gone, v)
		}
	}
	k.mu.Unlock()
	for _, v := range gone {
		if err := k.unmount(ctx, v); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Volume cleaned up", "driver", v.driver.name, "volume", v.handle, "forced", cleanupForce(v.rebooted, k.cfg.ForceCleanup))
	}
	if len(gone) > 0 {
		if err := k.reportInUse(ctx, wanted); err != nil {
			errs = append(errs, err)
		}
	}
	if err := k.releaseStopped(ctx, c, pods, wanted); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d volume operation(s) failed, first: %w", len(errs), errs[0])
	}
	return nil
}

// wantedVolumes resolves the claims of running pods to CSI volumes of the
// node's drivers, from the caches. Pods marked for deletion no longer need
// their volumes: KWOK has stopped, or is stopping, their containers.
func (k *Kubelet) wantedVolumes(c caches, pods []*corev1.Pod) (map[volKey]*want, error) {
	out := map[volKey]*want{}
	for _, pod := range pods {
		if stopping(pod) {
			continue
		}
		vols, err := k.podVolumes(c, pod)
		if err != nil {
			return nil, err
		}
		for key, pv := range vols {
			w := out[key]
			if w == nil {
				w = &want{pv: pv}
				out[key] = w
			}
			w.pods = append(w.pods, pod)
		}
	}
	return out, nil
}

// stopping reports whether a pod's containers are stopped or stopping.
func stopping(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podVolumes resolves a pod's claims to the CSI volumes of the node's
// drivers (with their PersistentVolume's name), from the caches. Claims
// and volumes not found, or not bound yet, are left out: a later event
// retries.
func (k *Kubelet) podVolumes(c caches, pod *corev1.Pod) (map[volKey]string, error) {
	out := map[volKey]string{}
	for _, vol := range pod.Spec.Volumes {
		if vol.PersistentVolumeClaim == nil {
			continue
		}
		// A lookup error leaves the desired state unknown: give up this
		// round rather than take the volume for unneeded and unmount it.
		pvc, err := c.pvcs.PersistentVolumeClaims(pod.Namespace).Get(vol.PersistentVolumeClaim.ClaimName)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting claim %s/%s: %w", pod.Namespace, vol.PersistentVolumeClaim.ClaimName, err)
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		pv, err := c.pvs.Get(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("getting volume %s: %w", pvc.Spec.VolumeName, err)
		}
		if pv.Spec.CSI == nil || k.drivers[pv.Spec.CSI.Driver] == nil {
			continue
		}
		out[volKey{driver: pv.Spec.CSI.Driver, handle: pv.Spec.CSI.VolumeHandle}] = pv.Name
	}
	return out, nil
}

// releaseStopped marks the volumes of stopped pods unmounted once none of
// them is still published for the pod, which lets KWOK delete the pod
// object: the real kubelet deletes a pod only once its volumes are
// unmounted (after NodeUnpublishVolume, whatever the unstage does). A
// volume another running pod of the node still uses counts as unmounted
// for this one, as the kubelet unpublishes each pod's target on its own.
func (k *Kubelet) releaseStopped(ctx context.Context, c caches, pods []*corev1.Pod, wanted map[volKey]*want) error {
	var errs []error
	for _, pod := range pods {
		if !stopping(pod) || pod.Status.Phase == corev1.PodRunning || pod.Annotations[cluster.VolumesMountedAnnotation] != "true" {
			continue
		}
		vols, err := k.podVolumes(c, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k.anyPublished(vols, wanted) {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"false"}}}`, cluster.VolumesMountedAnnotation)
		if _, err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("marking volumes of pod %s/%s unmounted: %w", pod.Namespace, pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

// anyPublished reports whether one of vols may still be published for a
// stopped pod: the node holds it (published, being staged, or found again
// after a reboot), its clean-up has not unpublished it yet, and no running
// pod wants it.
func (k *Kubelet) anyPublished(vols map[volKey]string, wanted map[volKey]*want) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range vols {
		if v := k.vols[key]; v != nil && !v.unpublished && wanted[key] == nil {
			return true
		}
	}
	return false
}

func (k *Kubelet) reportInUse(ctx context.Context, wanted map[volKey]*want) error {
	k.mu.Lock()
	set := map[string]bool{}
	// Like the kubelet's volume manager, report only attachable volumes.
	for _, keys := range []iter.Seq[volKey]{maps.Keys(wanted), maps.Keys(k.vols)} {
		for key := range keys {
			if !k.drivers[key.driver].noAttach {
				set[string(nodeutil.CSIUniqueVolumeName(key.driver, key.handle))] = true
			}
		}
	}
	// A shutting-down kubelet posts its node status no more (unless
	// ReportReleased): what it reported stays, the volumes its shutdown
	// cleaned up included.
	if sd := k.shutdown; sd != nil && !sd.cfg.ReportReleased {
		for _, n := range k.inUse {
			set[n] = true
		}
	}
	inUse := make([]string, 0, len(set))
	for n := range set {
		inUse = append(inUse, n)
	}
	sort.Strings(inUse)
	same := equality.Semantic.DeepEqual(inUse, k.inUse) && k.inUse != nil
	k.mu.Unlock()
	if same {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": inUse}})
	if err != nil {
		return fmt.Errorf("encoding volumesInUse: %w", err)
	}
	if _, err := k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("reporting volumesInUse: %w", err)
	}
	k.mu.Lock()
	k.inUse = inUse
	k.mu.Unlock()
	return nil
}

// paths are the staging and target paths of a volume: the first driver's
// under DataDir, another's under a directory named after it.
func (k *Kubelet) paths(d *nodeDriver, handle string) (staging, target string) {
	dir := k.cfg.DataDir
	if !d.primary {
		dir = filepath.Join(dir, d.name)
	}
	return filepath.Join(dir, "staging", handle), filepath.Join(dir, "target", handle)
}

var rwoCapability = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

// mount stages and publishes a wanted volume once it is attached to this
// node, starts its writer and marks its pods' volumes mounted. Attached
// means what the kubelet checks: listed in node.status.volumesAttached by
// the attach/detach controller (verifyControllerAttachedVolume), and its
// VolumeAttachment attached (the CSI plugin's WaitForAttach, which also
// gives the publish context). The controller takes a volume off that list
// before it detaches it, so a kubelet never stages a volume being
// detached; the VolumeAttachment alone still says attached then.
func (k *Kubelet) mount(ctx context.Context, key volKey, w *want, c caches) error {
	handle, d := key.handle, k.drivers[key.driver]
	k.mu.Lock()
	v := k.vols[key]
	if v == nil {
		v = &volume{driver: d, handle: handle, pv: w.pv}
		k.vols[key] = v
	}
	published, noAttach := v.published, d.noAttach
	k.mu.Unlock()
	if !published {
		var publishContext map[string]string
		if !noAttach {
			if !k.reportedAttached(c.nodes, nodeutil.CSIUniqueVolumeName(d.name, handle)) {
				return nil // not attached, or being detached, as far as the controller says
			}
			va := attachedVA(c.vas, w.pv, k.cfg.NodeName)
			if va == nil {
				return nil // the attach/detach controller and the attacher are not done yet
			}
			publishContext = va.Status.AttachmentMetadata
		}
		staging, target := k.paths(d, handle)
		if _, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
			VolumeId: handle, PublishContext: publishContext,
			StagingTargetPath: staging, VolumeCapability: rwoCapability,
		}); err != nil {
			return fmt.Errorf("NodeStageVolume %s: %w", handle, err)
		}
		sess, err := k.stageISCSI(ctx, publishContext)
		if err != nil {
			return fmt.Errorf("staging %s: %w", handle, err)
		}
		if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
			VolumeId: handle, PublishContext: publishContext,
			StagingTargetPath: staging, TargetPath: target, VolumeCapability: rwoCapability,
		}); err != nil {
			if sess != nil {
				sess.close()
			}
			return fmt.Errorf("NodePublishVolume %s: %w", handle, err)
		}
		k.mu.Lock()
		v.published, v.rebooted, v.unpublished = true, false, false
		if sess != nil {
			if v.sess != nil {
				go v.sess.close() // a session from before, whose writer is stopping
			}
			v.sess = sess
		}
		k.startWriterLocked(v)
		k.mu.Unlock()
		klog.FromContext(ctx).Info("Volume staged and published", "driver", d.name, "volume", handle, "pv", w.pv)
	}
	for _, pod := range w.pods {
		if pod.Annotations[cluster.VolumesMountedAnnotation] == "true" {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, cluster.VolumesMountedAnnotation)
		if _, err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("marking volumes of pod %s/%s mounted: %w", pod.Namespace, pod.Name, err)
		}
	}
	return nil
}

// reportedAttached reports whether this node's status lists the volume
// as attached.
func (k *Kubelet) reportedAttached(nodes corelisters.NodeLister, unique corev1.UniqueVolumeName) bool {
	n, err := nodes.Get(k.cfg.NodeName)
	if err != nil {
		return false
	}
	for _, a := range n.Status.VolumesAttached {
		if a.Name == unique {
			return true
		}
	}
	return false
}

func attachedVA(index cache.Indexer, pv, node string) *storagev1.VolumeAttachment {
	objs, err := index.ByIndex(vaByPVAndNode, vaKey(pv, node))
	if err != nil {
		return nil
	}
	for _, o := range objs {
		if va, ok := o.(*storagev1.VolumeAttachment); ok && va.Status.Attached && va.DeletionTimestamp == nil {
			return va
		}
	}
	return nil
}

// unmount stops the writer and unpublishes and unstages the volume: the
// node-side clean-up that lifts a fence. Like the upstream kubelet it sends
// no force, unless Config.ForceCleanup asks for it after a reboot.
func (k *Kubelet) unmount(ctx context.Context, v *volume) error {
	k.mu.Lock()
	if !k.cfg.HeldOpen {
		k.stopWriterLocked(v)
	}
	force := cleanupForce(v.rebooted, k.cfg.ForceCleanup)
	k.mu.Unlock()
	staging, target := k.paths(v.driver, v.handle)
	unpub := &csi.NodeUnpublishVolumeRequest{VolumeId: v.handle, TargetPath: target}
	fence.SetForceUnpublish(unpub, force)
	if _, err := v.driver.node.NodeUnpublishVolume(ctx, unpub); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s (force=%t): %w", v.handle, force, err)
	}
	k.mu.Lock()
	k.stopWriterLocked(v)
	v.published, v.unpublished = false, true // the pod's object may go now, whatever the unstage does
	k.mu.Unlock()
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: v.handle, StagingTargetPath: staging}
	fence.SetForceUnstage(unstage, force)
	if _, err := v.driver.node.NodeUnstageVolume(ctx, unstage); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s (force=%t): %w", v.handle, force, err)
	}
	k.mu.Lock()
	delete(k.vols, volKey{driver: v.driver.name, handle: v.handle})
	k.mu.Unlock()
	return nil
}

// cleanupForce decides the force field of a clean-up: only after a reboot,
// and only when the test asked for forced clean-up.
func cleanupForce(rebooted, forceCleanup bool) bool { return rebooted && forceCleanup }

// startWriterLocked starts the periodic writer of a published volume:
// through the array's data plane for the memory backend, stamped blocks
// through the node's iSCSI session for the tgt backend.
func (k *Kubelet) startWriterLocked(v *volume) {
	if k.stopped && v.sess != nil {
		go v.sess.close()
		v.sess = nil
	}
	if v.stopWriter != nil || k.stopped {
		return
	}
	ctx, cancel := context.WithCancel(k.baseCtx)
	v.stopWriter = cancel
	write := func(ctx context.Context, seq int) error {
		data := fmt.Appendf(nil, "%s write %d at %s", k.cfg.NodeName, seq, time.Now().Format(time.RFC3339Nano))
		return client.Write(ctx, v.driver.conn, v.handle, data)
	}
	if sess := v.sess; sess != nil {
		write = k.blockWrite(v, sess)
		v.sess = nil // the writer owns the session from here: a stopped writer logs it out
		k.writersWG.Add(1)
		go func() {
			defer k.writersWG.Done()
			<-ctx.Done()
			sess.close()
		}()
	}
	k.writersWG.Add(1)
	go func() {
		defer k.writersWG.Done()
		k.writeLoop(ctx, v, write)
	}()
}

// writeLoop calls write every WriteInterval until ctx ends, recording each
// answer.
func (k *Kubelet) writeLoop(ctx context.Context, v *volume, write func(ctx context.Context, seq int) error) {
	tick := time.NewTicker(k.cfg.WriteInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		k.seq++
		seq, powered := k.seq, k.powered
		k.mu.Unlock()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		sent := time.Now()
		err := write(wctx, seq)
		wcancel()
		if ctx.Err() != nil {
			return // stopped mid-write: the answer no longer counts
		}
		k.mu.Lock()
		k.writes = append(k.writes, Write{Sent: sent, Time: time.Now(), VolumeID: v.handle, Driver: v.driver.name, Seq: seq, PoweredOn: powered, Err: err})
		k.mu.Unlock()
	}
}

// stopWriterLocked stops the volume's writer, if it has one.
func (k *Kubelet) stopWriterLocked(v *volume) {
	if v.stopWriter != nil {
		v.stopWriter()
		v.stopWriter = nil
	}
}

func (k *Kubelet) stopWritersLocked() {
	for _, v := range k.vols {
		if v.stopWriter != nil {
			v.stopWriter()
			v.stopWriter = nil
		}
	}
}

// SentAfter counts the writes sent after t that were accepted, and those
// refused: what a fence that returned at t must have refused, every one.
// A write sent before t and answered after it may land either way.
func SentAfter(writes []Write, t time.Time) (accepted, refused int) {
	for _, w := range writes {
		switch {
		case !w.Sent.After(t):
		case w.Err == nil:
			accepted++
		default:
			refused++
		}
	}
	return accepted, refused
}

// Accepted counts the writes the driver accepted after t, and how many it
// rejected.
func Accepted(writes []Write, after time.Time) (accepted, rejected int) {
	for _, w := range writes {
		if !w.Time.After(after) {
			continue
		}
		if w.Err == nil {
			accepted++
		} else {
			rejected++
		}
	}
	return accepted, rejected
}
