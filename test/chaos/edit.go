package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// RuleFenceRecordNotRestored: a third party removed Fenceline's fence
// record or intent from a VolumeAttachment that the running
// fenceline-attacher had seen with it, and the attacher did not write it
// back within editRestoreBound while the VolumeAttachment stayed.
const RuleFenceRecordNotRestored = "fence-record-not-restored"

// eventFenceRecordRestored is fenceline-attacher's Warning on a record or
// intent it wrote back.
const eventFenceRecordRestored = "FenceRecordRestored"

// Bounds of the third party's edit (EditFenceAnnotations).
const (
	// editSearch is how long from its moment the edit waits for a
	// VolumeAttachment with a record or intent: they exist only while a
	// detach is decided and under way.
	editSearch = 30 * time.Second
	// editSeen is how long the same attacher process must have been
	// running while the harness saw the annotation, so that its watch
	// delivered it (the attacher remembers what it has seen).
	editSeen = 2 * time.Second
	// editRestoreBound is how long the attacher has to write it back.
	editRestoreBound = 20 * time.Second
	// editStuckCalls is how many ControllerUnpublishVolume calls fail
	// from the edit's moment: the detach the third party pokes at is one
	// that keeps failing (and so lingers long enough to be edited).
	editStuckCalls = 6
)

// fenceAnnotations are the annotations the third party removes.
var fenceAnnotations = []string{names.FenceRecordAnnotation, names.FenceIntentAnnotation}

// EditOutcome counts what became of the annotations a third party removed.
type EditOutcome struct {
	// Removed counts the VolumeAttachments edited; Restored those written
	// back, WithEvent those of them with a FenceRecordRestored Event;
	// Detached those whose detach finished first (the audit log judges
	// it); Inconclusive those whose attacher restarted meanwhile (its
	// memory went with it).
	Removed, Restored, WithEvent, Detached, Inconclusive int
}

// startEdit runs the third party's edit in the background; Run waits for
// it (e.bg) before it gathers the facts.
func (e *episode) startEdit() {
	e.bg.Go(func() {
		if err := e.editFenceAnnotations(); err != nil {
			e.timeline.Add(time.Now(), "third party: %v", err)
		}
	})
}

// editFenceAnnotations plays an operator poking at a detach that keeps
// failing: the next editStuckCalls unpublishes fail, and the
// VolumeAttachments carrying a record or intent the running attacher has
// seen lose those annotations; then it judges whether the attacher writes
// them back.
func (e *episode) editFenceAnnotations() error {
	for _, d := range e.p.Drivers() {
		if err := e.w.SetDriverFaultsOf(e.ctx, d, faults.FailNext("ControllerUnpublishVolume", editStuckCalls, codes.Unavailable)); err != nil {
			e.timeline.Add(time.Now(), "third party: the stuck detach of %s was not set up: %v", d, err)
		}
	}
	vas, attachers, err := e.annotatedVAs()
	if err != nil || len(vas) == 0 {
		return err
	}
	removed := map[string][]string{}
	for _, va := range slices.Sorted(maps.Keys(vas)) {
		keys := vas[va]
		patch := map[string]any{"metadata": map[string]any{"annotations": nullAll(keys)}}
		body, _ := json.Marshal(patch)
		if _, err := e.w.Cluster.Client().StorageV1().VolumeAttachments().Patch(e.ctx, va, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			e.timeline.Add(time.Now(), "third party: removing %v from VolumeAttachment %s failed: %v", keys, va, err)
			continue
		}
		removed[va] = keys
		e.timeline.Add(time.Now(), "third party: removed %s from VolumeAttachment %s", strings.Join(keys, ", "), va)
	}
	out := e.judgeRestore(removed, attachers)
	e.mu.Lock()
	e.edits.Removed += out.Removed
	e.edits.Restored += out.Restored
	e.edits.WithEvent += out.WithEvent
	e.edits.Detached += out.Detached
	e.edits.Inconclusive += out.Inconclusive
	e.mu.Unlock()
	return nil
}

// sighting is when a VolumeAttachment of driver was first seen with a
// record or intent while attacher, a process of that driver's attacher,
// ran.
type sighting struct {
	at       time.Time
	driver   string
	attacher *cluster.Process
}

// annotatedVAs waits up to editSearch for VolumeAttachments that have
// carried a record or intent for editSeen under one running process of
// their driver's attacher, and returns them with the annotations they
// carry, and how they were seen, by VolumeAttachment.
func (e *episode) annotatedVAs() (map[string][]string, map[string]sighting, error) {
	seen := map[string]sighting{}
	var found map[string][]string
	var attachers map[string]sighting
	err := world.WaitFor(e.ctx, editSearch, "a VolumeAttachment with a fence record or intent", func(ctx context.Context) (bool, error) {
		list, err := e.w.Cluster.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // the API server may be restarting: look again
		}
		now, running := time.Now(), map[string]*cluster.Process{}
		for _, d := range e.p.Drivers() {
			running[d] = e.runningAttacher(d)
		}
		found, attachers = map[string][]string{}, map[string]sighting{}
		for _, va := range list.Items {
			current := running[va.Spec.Attacher]
			var keys []string
			for _, k := range fenceAnnotations {
				if _, ok := va.Annotations[k]; ok {
					keys = append(keys, k)
				}
			}
			s, ok := seen[va.Name]
			switch {
			case len(keys) == 0 || current == nil:
				delete(seen, va.Name)
			case !ok || s.attacher != current:
				seen[va.Name] = sighting{at: now, driver: va.Spec.Attacher, attacher: current}
			case now.Sub(s.at) >= editSeen:
				found[va.Name], attachers[va.Name] = keys, s
			}
		}
		return len(found) > 0, nil
	})
	if err != nil {
		e.timeline.Add(time.Now(), "third party: no VolumeAttachment with a fence record or intent within %s; nothing edited", editSearch)
		return nil, nil, nil
	}
	return found, attachers, nil
}

// judgeRestore waits up to editRestoreBound for each edited
// VolumeAttachment to be written back (or gone, or the attacher process
// that had seen it, in attachers, restarted), then looks for the
// attachers' Events; what is still missing is a finding.
func (e *episode) judgeRestore(removed map[string][]string, attachers map[string]sighting) EditOutcome {
	out := EditOutcome{Removed: len(removed)}
	pending := maps.Clone(removed)
	restored := map[string]bool{}
	// restarted moves the VolumeAttachments whose attacher restarted out
	// of pending: its memory went with it, so they are not judged.
	restarted := func() {
		for va := range pending {
			if s := attachers[va]; e.runningAttacher(s.driver) != s.attacher {
				out.Inconclusive++
				delete(pending, va)
				e.timeline.Add(time.Now(), "third party: the fenceline-attacher that had seen VolumeAttachment %s restarted before it was written back: not judged", va)
			}
		}
	}
	_ = world.WaitFor(e.ctx, editRestoreBound, "the fence annotations written back", func(ctx context.Context) (bool, error) {
		if restarted(); len(pending) == 0 {
			return true, nil
		}
		for va, keys := range pending {
			got, err := e.w.Cluster.Client().StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				out.Detached++
				delete(pending, va)
				e.timeline.Add(time.Now(), "third party: VolumeAttachment %s detached before a write-back was seen", va)
			case err != nil:
			case hasAll(got.Annotations, keys):
				out.Restored++
				restored[va] = true
				delete(pending, va)
				e.timeline.Add(time.Now(), "VolumeAttachment %s: %s written back", va, strings.Join(keys, ", "))
			}
		}
		return len(pending) == 0, nil
	})
	restarted()
	for va, keys := range pending {
		e.addFinding(Finding{Rule: RuleFenceRecordNotRestored, Detail: fmt.Sprintf("VolumeAttachment %s: %s removed by a third party and not written back within %s by the fenceline-attacher that had seen it", va, strings.Join(keys, ", "), editRestoreBound)})
	}
	for va := range restored {
		if e.restoredEvent(va) {
			out.WithEvent++
		}
	}
	return out
}

// restoredEvent reports whether a FenceRecordRestored Event names va.
func (e *episode) restoredEvent(va string) bool {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("reason", eventFenceRecordRestored),
		fields.OneTermEqualSelector("involvedObject.name", va)).String()
	found := false
	_ = world.WaitFor(e.ctx, 5*time.Second, "a "+eventFenceRecordRestored+" Event on "+va, func(ctx context.Context) (bool, error) {
		evs, err := e.w.Cluster.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		found = err == nil && len(evs.Items) > 0
		return found, nil
	})
	if found {
		e.timeline.Add(time.Now(), "Warning %s on VolumeAttachment %s", eventFenceRecordRestored, va)
	}
	return found
}

// runningAttacher returns the process of driver's fenceline-attacher if it
// runs; with two replicas, the one that leads (the memory that counts is
// the leader's), nil during a hand-over.
func (e *episode) runningAttacher(driver string) *cluster.Process {
	if e.p.AttacherReplicas > 1 {
		return e.leaderNow(driver)
	}
	e.procMu.Lock()
	defer e.procMu.Unlock()
	p := e.w.AttacherOf(driver)
	if p == nil {
		return nil
	}
	if exited, _ := p.Exited(); exited {
		return nil
	}
	return p
}

func (e *episode) addFinding(f Finding) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.findings = append(e.findings, f)
}

func nullAll(keys []string) map[string]any {
	m := map[string]any{}
	for _, k := range keys {
		m[k] = nil
	}
	return m
}

func hasAll(annotations map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := annotations[k]; !ok {
			return false
		}
	}
	return true
}
