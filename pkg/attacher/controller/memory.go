package controller

import (
	"context"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// EventFenceRecordRestored (Warning): a fence record or intent that this
// attacher had seen on the VolumeAttachment was removed by someone else; it
// was written back, and the detach stays fenced.
const EventFenceRecordRestored = "FenceRecordRestored"

// fenceAnnotations are the VolumeAttachment annotations that say a detach
// must be fenced. Nobody but Fenceline writes them and nobody removes them.
var fenceAnnotations = []string{names.FenceRecordAnnotation, names.FenceIntentAnnotation}

// remember keeps, for the life of the process, every fence record and intent
// seen on a VolumeAttachment (keyed by UID, so a re-created object with the
// same name starts afresh). A value once seen is never replaced by nothing.
func (t *tracker) remember(va *storagev1.VolumeAttachment) {
	if va == nil {
		return
	}
	seen := map[string]string{}
	for _, key := range fenceAnnotations {
		if raw, ok := va.Annotations[key]; ok {
			seen[key] = raw
		}
	}
	if len(seen) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fences[va.UID] == nil {
		t.fences[va.UID] = map[string]string{}
	}
	maps.Copy(t.fences[va.UID], seen)
}

// hasFence reports whether a fence record or intent is on va or was seen
// on it.
func (t *tracker) hasFence(va *storagev1.VolumeAttachment) bool {
	for _, key := range fenceAnnotations {
		if _, ok := va.Annotations[key]; ok {
			return true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fences[va.UID]) > 0
}

// removedFences returns the remembered fence annotations that va lacks, by
// key, with their remembered values.
func (t *tracker) removedFences(va *storagev1.VolumeAttachment) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[string]string
	for key, raw := range t.fences[va.UID] {
		if _, ok := va.Annotations[key]; !ok {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = raw
		}
	}
	return out
}

func (t *tracker) forgetFences(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.fences, uid)
}

// restoreFences returns the fence record and intent that hold for va: those
// on the object, and those this process saw on it before that someone has
// removed since. A removed one is written back before anything is decided
// (a decision is never forgotten, and the next attacher must find it too),
// with a Warning Event. An unreadable value still counts as a fence.
func (c *Controller) restoreFences(ctx context.Context, va *storagev1.VolumeAttachment) (*storagev1.VolumeAttachment, knownFence, error) {
	logger := klog.FromContext(ctx)
	c.track.remember(va)
	for key, raw := range c.track.removedFences(va) {
		rec, err := cutoff.DecodeRecord(raw)
		if err != nil {
			logger.Error(err, "Remembered fence annotation is unreadable; writing it back as it was", "annotation", key)
		}
		out, err := c.writeFenceAnnotationRaw(ctx, va, key, raw)
		if err != nil {
			return va, knownFence{}, fmt.Errorf("write back fence annotation %s that was removed: %w", key, err)
		}
		msg := fmt.Sprintf("Annotation %s (%s, reason %s) was removed from this VolumeAttachment by someone else; it was written back and the detach from node %s stays fenced. Never remove Fenceline's fence annotations",
			key, rec.Writer(), rec.Reason, va.Spec.NodeName)
		logger.Info("Fence annotation was removed; written back", "annotation", key, "value", raw)
		c.volumeEvent(va, v1.EventTypeWarning, EventFenceRecordRestored, msg)
		c.cfg.Metrics.Restored(key)
		va = out
	}
	var known knownFence
	var err error
	if known.record, err = fencing.RecordOf(va); err != nil {
		logger.Error(err, "Unreadable fence record; the detach stays fenced")
	}
	if known.intent, err = cutoff.IntentOf(va); err != nil {
		logger.Error(err, "Unreadable fence intent; the detach is fenced")
	}
	return va, known, nil
}

// writeFenceAnnotationRaw writes an annotation value exactly as given
// (a remembered one goes back unchanged, even if unreadable) through the
// record client, and marks the replaced version stale.
func (c *Controller) writeFenceAnnotationRaw(ctx context.Context, va *storagev1.VolumeAttachment, key, raw string) (*storagev1.VolumeAttachment, error) {
	clone := va.DeepCopy()
	if clone.Annotations == nil {
		clone.Annotations = map[string]string{}
	}
	clone.Annotations[key] = raw
	out, err := c.patchVAWith(ctx, c.cfg.RecordClient, va, clone, false)
	if err != nil {
		return va, err
	}
	c.track.supersede(va.Name, va.ResourceVersion, out.ResourceVersion)
	return out, nil
}

// onlyFenceAnnotationsChanged reports whether an update changed nothing but
// Fenceline's fence annotations (beyond bookkeeping metadata).
func onlyFenceAnnotationsChanged(oldVA, newVA *storagev1.VolumeAttachment) bool {
	o, n := oldVA.DeepCopy(), newVA.DeepCopy()
	for _, va := range []*storagev1.VolumeAttachment{o, n} {
		for _, key := range fenceAnnotations {
			delete(va.Annotations, key)
		}
		if len(va.Annotations) == 0 {
			va.Annotations = nil
		}
	}
	return onlyErrorsChanged(o, n)
}
