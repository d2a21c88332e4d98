package actuator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// EventFenceIntent (Normal, on the Node): fence intents were recorded on its
// VolumeAttachments before a write that makes their detach inevitable.
const EventFenceIntent = "FencelineFenceIntentRecorded"

// intentParallelism bounds concurrent intent writes for one node.
const intentParallelism = 8

// Intent is a fence intent to record before a write that makes detaches
// from a node inevitable: a force deletion, a release of volumesInUse, an
// out-of-service taint.
type Intent struct {
	// Reason is why the node is cut off (the record's reason).
	Reason cutoff.Reason
	// Controller is the writer's controller name (the record's "by").
	Controller string
	// Node is the node the volumes are detached from.
	Node *v1.Node
	// AllOfNode covers every volume attached to the node: its cached
	// VolumeAttachments and every CSI volume in status.volumesAttached.
	AllOfNode bool
	// Volumes are the CSI volumes whose detach becomes inevitable (names as
	// in node status), when not AllOfNode.
	Volumes []v1.UniqueVolumeName
	// PVs are the PersistentVolumes of those volumes: cached
	// VolumeAttachments of these PVs are covered too, whatever their name.
	PVs []string
	// Cached are the node's VolumeAttachments from the informer cache.
	Cached []*storagev1.VolumeAttachment
}

// IntentTarget is one VolumeAttachment to write an intent on.
type IntentTarget struct {
	// Name is the VolumeAttachment's name.
	Name string
	// NodeID is the CSI node ID it was attached with, when known.
	NodeID string
}

// IntentTargets states which VolumeAttachments must carry a fence intent
// before the write: every VolumeAttachment of the node that the intent
// covers and whose cached copy carries no intent yet. A volume is covered
// twice over: by its cached VolumeAttachment, and by the name the
// attach/detach controller gives it (nodeutil.CSIAttachmentName), so that a
// VolumeAttachment the cache has not seen yet is written too (a name that
// does not exist costs one NotFound). A cached intent is never rewritten;
// whatever the reason, any intent means "fence".
func IntentTargets(in Intent) []IntentTarget {
	if in.Node == nil {
		return nil
	}
	covered := func(va *storagev1.VolumeAttachment) bool {
		if in.AllOfNode {
			return true
		}
		pv := va.Spec.Source.PersistentVolumeName
		return pv != nil && slices.Contains(in.PVs, *pv)
	}
	seen := map[string]bool{}
	var out []IntentTarget
	for _, va := range in.Cached {
		if va == nil || va.Spec.NodeName != in.Node.Name || !covered(va) {
			continue
		}
		seen[va.Name] = true
		if _, ok := va.Annotations[names.FenceIntentAnnotation]; !ok {
			out = append(out, IntentTarget{Name: va.Name, NodeID: va.Annotations[names.NodeIDAnnotation]})
		}
	}
	vols := in.Volumes
	if in.AllOfNode {
		vols = nil
		for _, a := range in.Node.Status.VolumesAttached {
			vols = append(vols, a.Name)
		}
	}
	for _, v := range vols {
		driver, handle, ok := nodeutil.CSIVolumeOf(v)
		if !ok {
			continue
		}
		if name := nodeutil.CSIAttachmentName(driver, handle, in.Node.Name); !seen[name] {
			seen[name] = true
			out = append(out, IntentTarget{Name: name})
		}
	}
	slices.SortFunc(out, func(a, b IntentTarget) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// RecordIntent writes the fence intent on every VolumeAttachment
// IntentTargets names, before the caller's write: intent before cause. A
// VolumeAttachment that does not exist is skipped (nothing to detach); any
// other failure is returned, and the caller must not make its write. The
// patch touches only the intent annotation, so it needs no
// resourceVersion and cannot overwrite anyone else's change.
func (a *Actuator) RecordIntent(ctx context.Context, in Intent) error {
	targets := IntentTargets(in)
	if len(targets) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(in.Node), "reason", in.Reason)
	if a.DryRun {
		logger.Info("Dry run: would record fence intents", "volumeAttachments", len(targets))
		return nil
	}
	by := cutoff.ByControllerPrefix + in.Controller
	errs := make([]error, len(targets))
	written := make([]bool, len(targets))
	workqueue.ParallelizeUntil(ctx, intentParallelism, len(targets), func(i int) {
		t := targets[i]
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			names.FenceIntentAnnotation: cutoff.NewRecord(in.Reason, t.NodeID, by, a.now()).Encode(),
		}}})
		if err != nil {
			errs[i] = err
			return
		}
		_, err = a.Client.StorageV1().VolumeAttachments().Patch(ctx, t.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs[i] = fmt.Errorf("record fence intent on VolumeAttachment %s: %w", t.Name, err)
		default:
			written[i] = true
		}
	})
	n := 0
	for _, w := range written {
		if w {
			n++
		}
	}
	if n > 0 {
		logger.V(2).Info("Recorded fence intents", "volumeAttachments", n)
		a.Recorder.Eventf(in.Node, v1.EventTypeNormal, EventFenceIntent,
			"Recorded fence intent (%s) on %d VolumeAttachment(s): their detach from this node will be fenced, whatever the node looks like by then", in.Reason, n)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fence intent before the write not recorded, so the write is not made: %w", err)
	}
	return nil
}
