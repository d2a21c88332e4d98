package nodefencing

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodequeue"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// The StorageFenced condition's reasons.
const (
	ReasonStorageFenced  = "AllVolumesDetached"
	ReasonStorageWaiting = "VolumeAttachmentsRemain"
)

// storageWatch remembers, per node, the VolumeAttachments deleted with the
// attacher's fence record (names.FenceRecordAnnotation): detaches decided
// fenced, whose fenced ControllerUnpublishVolume succeeded (the attacher
// removes its finalizer only then). A VolumeAttachment is gone once
// detached, so the informer's deletion is the one moment to see it; the
// memory is kept per request (a new request of the node starts afresh)
// and lost on a restart, which costs only the names of detaches the status
// did not list yet.
type storageWatch struct {
	enqueue func(node string)

	mu    sync.Mutex
	nodes map[string]*fencedDetaches
}

// fencedDetaches are one node's fenced detaches seen, by driver, since
// the controller first followed request.
type fencedDetaches struct {
	request  types.UID
	byDriver map[string][]string
}

func newStorageWatch(enqueue func(string)) *storageWatch {
	return &storageWatch{enqueue: enqueue, nodes: map[string]*fencedDetaches{}}
}

// watchStorage feeds the controller's storageWatch from the
// VolumeAttachment informer.
func (c *Controller) watchStorage(vas cache.SharedIndexInformer) error {
	c.storage = newStorageWatch(c.queue.Enqueue)
	return nodequeue.AddHandler(vas, "VolumeAttachment (fenced detaches)", cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if va, ok := nodequeue.DeletedObject[*storagev1.VolumeAttachment](obj); ok {
				c.storage.deleted(va)
			}
		},
	})
}

// deleted notes a VolumeAttachment deleted with a fence record.
func (w *storageWatch) deleted(va *storagev1.VolumeAttachment) {
	if va.Annotations[names.FenceRecordAnnotation] == "" || va.Spec.NodeName == "" {
		return
	}
	w.mu.Lock()
	d := w.nodes[va.Spec.NodeName]
	if d == nil {
		d = &fencedDetaches{byDriver: map[string][]string{}}
		w.nodes[va.Spec.NodeName] = d
	}
	if !slices.Contains(d.byDriver[va.Spec.Attacher], va.Name) {
		d.byDriver[va.Spec.Attacher] = append(d.byDriver[va.Spec.Attacher], va.Name)
	}
	w.mu.Unlock()
	w.enqueue(va.Spec.NodeName)
}

// forRequest returns the fenced detaches of node seen for request r, by
// driver: those seen since the controller first asked for r (a detach is
// fenced only after its node is, which this controller made happen, so
// it asked for r before), none for another request.
func (w *storageWatch) forRequest(node string, r types.UID) map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.nodes[node]
	if d == nil || (d.request != "" && d.request != r) {
		d = &fencedDetaches{request: r, byDriver: map[string][]string{}}
		w.nodes[node] = d
	}
	d.request = r
	out := make(map[string][]string, len(d.byDriver))
	for drv, vas := range d.byDriver {
		out[drv] = slices.Clone(vas)
	}
	return out
}

// StorageStatus is status.storage and the StorageFenced condition of a
// fenced node's request: per driver, the VolumeAttachments detached with
// fence=true and whether any of the driver's is left for the node
// (remaining, by driver). A driver is fenced once none is left. The
// condition is True once no VolumeAttachment of any driver is left.
//
// netFenced holds the drivers whose every NetworkFence of the request the
// storage confirmed: such a driver refuses the node whatever is left
// attached to it, so it counts as fenced.
func StorageStatus(fenced, remaining map[string][]string, netFenced map[string]bool) ([]fencingv1alpha1.StorageFenceStatus, metav1.ConditionStatus, string, string) {
	seen := map[string]bool{}
	for d := range fenced {
		seen[d] = true
	}
	for d := range remaining {
		seen[d] = true
	}
	for d, ok := range netFenced {
		seen[d] = seen[d] || ok
	}
	drivers := slices.Sorted(maps.Keys(seen))
	var out []fencingv1alpha1.StorageFenceStatus
	var left []string
	for _, d := range drivers {
		vas := slices.Sorted(slices.Values(fenced[d]))
		if len(vas) > 256 {
			vas = vas[len(vas)-256:]
		}
		s := fencingv1alpha1.StorageFenceStatus{Driver: d, Fenced: len(remaining[d]) == 0 || netFenced[d], VolumeAttachments: vas}
		s.Message = fmt.Sprintf("%d VolumeAttachments detached with fence=true", len(fenced[d]))
		if netFenced[d] {
			s.Message += "; its NetworkFences are confirmed"
		}
		if n := len(remaining[d]); n > 0 && !netFenced[d] {
			s.Message += fmt.Sprintf("; %d still attached or detaching", n)
			left = append(left, fmt.Sprintf("%s (%d)", d, n))
		}
		out = append(out, s)
	}
	if len(left) > 0 {
		return out, metav1.ConditionFalse, ReasonStorageWaiting, "VolumeAttachments are left for the node: " + strings.Join(left, ", ")
	}
	if slices.Contains(slices.Collect(maps.Values(netFenced)), true) {
		return out, metav1.ConditionTrue, ReasonStorageFenced, "every driver's volumes are detached from the node or refused to it by a confirmed NetworkFence"
	}
	return out, metav1.ConditionTrue, ReasonStorageFenced, "no VolumeAttachment is left for the node: every volume is detached from it"
}

// reportStorage writes the storage half of a fence onto the node's Fenced
// or Recovering request: which VolumeAttachments were detached with
// fence=true, per driver, and StorageFenced. It only reports; it decides
// nothing, and no decision reads it.
func (c *Controller) reportStorage(ctx context.Context, in Input) error {
	r := in.Request
	if r == nil || (r.Status.Phase != fencingv1alpha1.FencingPhaseFenced && r.Status.Phase != fencingv1alpha1.FencingPhaseRecovering) {
		return nil
	}
	vas, err := c.vas.ByIndex(nodeutil.VAsByNodeIndex, r.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("looking up the VolumeAttachments of node %s: %w", r.Spec.NodeName, err)
	}
	remaining := map[string][]string{}
	for _, o := range vas {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			remaining[va.Spec.Attacher] = append(remaining[va.Spec.Attacher], va.Name)
		}
	}
	storage, status, reason, msg := StorageStatus(c.storage.forRequest(r.Spec.NodeName, r.UID), remaining, netFencedDrivers(in.NetworkFence))
	apply := func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		changed := setConditionReason(s, fencingv1alpha1.FencingRequestStorageFenced, status, reason, msg, now)
		if merged := mergeStorage(s.Storage, storage); !slices.EqualFunc(merged, s.Storage, storageEqual) {
			s.Storage, changed = merged, true
		}
		return changed
	}
	changed, err := c.noteStatus(ctx, r, apply)
	if err == nil && changed {
		klog.FromContext(ctx).V(2).Info("Reported the storage fence", "request", r.Name, "storageFenced", status, "why", msg)
	}
	return ignoreGone(err)
}

// mergeStorage keeps every VolumeAttachment already listed (a restart
// forgets the detaches it saw) and takes the rest from cur.
func mergeStorage(old, cur []fencingv1alpha1.StorageFenceStatus) []fencingv1alpha1.StorageFenceStatus {
	byDriver := map[string]fencingv1alpha1.StorageFenceStatus{}
	for _, s := range cur {
		byDriver[s.Driver] = s
	}
	for _, o := range old {
		s, ok := byDriver[o.Driver]
		if !ok {
			if len(o.NetworkFences) > 0 {
				byDriver[o.Driver] = o
			}
			continue
		}
		for _, nf := range o.NetworkFences {
			if !slices.Contains(s.NetworkFences, nf) {
				s.NetworkFences = append(s.NetworkFences, nf)
			}
		}
		slices.Sort(s.NetworkFences)
		for _, va := range o.VolumeAttachments {
			if !slices.Contains(s.VolumeAttachments, va) {
				s.VolumeAttachments = append(s.VolumeAttachments, va)
			}
		}
		slices.Sort(s.VolumeAttachments)
		byDriver[o.Driver] = s
	}
	out := make([]fencingv1alpha1.StorageFenceStatus, 0, len(byDriver))
	for _, d := range slices.Sorted(maps.Keys(byDriver)) {
		out = append(out, byDriver[d])
	}
	return out
}

func storageEqual(a, b fencingv1alpha1.StorageFenceStatus) bool {
	return a.Driver == b.Driver && a.Fenced == b.Fenced && a.Message == b.Message && slices.Equal(a.VolumeAttachments, b.VolumeAttachments) && slices.Equal(a.NetworkFences, b.NetworkFences)
}

// netFencedDrivers are the drivers (NetworkFenceClass provisioners) whose
// every NetworkFence the storage confirmed.
func netFencedDrivers(nf NetworkFenceInput) map[string]bool {
	out := map[string]bool{}
	for _, f := range nf.Fences {
		c, ok := nf.Classes[f.Class]
		if !ok {
			continue
		}
		if prev, seen := out[c.Provisioner]; !seen || prev {
			out[c.Provisioner] = f.Fenced()
		}
	}
	return out
}
