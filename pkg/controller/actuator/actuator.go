// Package actuator performs the writes the Fenceline controllers decide on:
// force-deleting pods, tainting and untainting nodes, releasing volumes from
// node status and annotating nodes. Every write is announced by an Event and
// a log line, and none happens in dry-run mode. Keeping all writes here keeps
// the controllers' policy code free of I/O.
package actuator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// DisruptionReason is the reason of the DisruptionTarget condition that
// Fenceline puts on a pod it force-deletes, in the spirit of upstream pod
// GC's DeletionByPodGC.
const DisruptionReason = "DeletionByFenceline"

// Event reasons.
const (
	EventForceDeleted    = "FencelineForceDeleted"
	EventForceDeleteFail = "FencelineForceDeleteFailed"
	EventTainted         = "FencelineTainted"
	EventUntainted       = "FencelineUntainted"
	EventVolumesReleased = "FencelineVolumesReleased"
)

// Actuator performs writes against the API server.
type Actuator struct {
	// Client writes to the API server.
	Client kubernetes.Interface
	// Recorder records the Event that explains each action.
	Recorder record.EventRecorder
	// Metrics counts force deletions; nil disables metrics.
	Metrics *metrics.Metrics
	// DryRun makes every method log and record what it would do, and
	// change nothing.
	DryRun bool
	// Now returns the current time; tests may replace it.
	Now func() time.Time
}

// Deletion explains one force deletion.
type Deletion struct {
	// Reason is the metric reason (metrics.ReasonOutOfService, ...).
	Reason string
	// Message says why, for the pod condition and the Event.
	Message string
	// Trigger is when the pod became eligible; zero when unknown.
	Trigger time.Time
}

func (a *Actuator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// ForceDeletePod marks the pod Failed with a DisruptionTarget condition and
// deletes it with grace period 0 and a UID precondition, so that a
// replacement pod with the same name (StatefulSet) is never deleted. A pod
// that is already gone or was replaced counts as success: kube-controller-
// manager's pod GC may race us to it.
//
// Once the pod is Failed, the API server turns any graceful delete into an
// immediate one, so another client's pending delete (taint eviction, the
// StatefulSet controller) may complete before ours. The pod was still
// removed because we marked it, so that case is reported like our own
// deletion, with a message that says so.
func (a *Actuator) ForceDeletePod(ctx context.Context, pod *v1.Pod, d Deletion) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "uid", pod.UID, "reason", d.Reason)
	if a.DryRun {
		logger.Info("Dry run: would force-delete pod", "message", d.Message)
		a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleted, "Dry run: would force-delete pod: %s", d.Message)
		return nil
	}
	mark, err := a.markFailed(ctx, pod, d.Message)
	if err == nil && mark == markGone {
		logger.V(2).Info("Pod already gone or replaced")
		return nil
	}
	completedByOther := false
	if err == nil {
		err = a.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			if mark != markWritten {
				logger.V(2).Info("Pod already gone or replaced")
				return nil
			}
			completedByOther, err = true, nil
		}
	}
	if err != nil {
		a.Metrics.ObserveForceDeleteError(pod.Namespace, d.Reason)
		a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleteFail, "Force deletion failed: %v", err)
		return fmt.Errorf("force-deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.Metrics.ObserveForceDelete(pod.Namespace, d.Reason, d.Trigger, a.now())
	if completedByOther {
		a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleted,
			"Force-deleted: %s (marked Failed; another client's pending delete then removed it at once)", d.Message)
		logger.Info("Force-deleted pod: marked Failed, another client's delete completed first", "message", d.Message)
		return nil
	}
	a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleted, "Force-deleted: %s", d.Message)
	logger.Info("Force-deleted pod", "message", d.Message)
	return nil
}

// markOutcome says what markFailed found or did.
type markOutcome int

const (
	// markWritten: this call set phase Failed and the condition.
	markWritten markOutcome = iota
	// markAlreadyTerminal: the pod was Failed or Succeeded already.
	markAlreadyTerminal
	// markGone: the pod was deleted or replaced by a new one.
	markGone
)

// markFailed sets phase Failed and the DisruptionTarget condition, as
// upstream pod GC does, so that Job controllers and disruption budgets see
// why the pod went away.
func (a *Actuator) markFailed(ctx context.Context, pod *v1.Pod, message string) (markOutcome, error) {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return markAlreadyTerminal, nil
	}
	cur := pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		upd := cur.DeepCopy()
		upd.Status.Phase = v1.PodFailed
		cond := v1.PodCondition{
			Type:               v1.DisruptionTarget,
			Status:             v1.ConditionTrue,
			Reason:             DisruptionReason,
			Message:            message,
			LastTransitionTime: metav1.NewTime(a.now()),
		}
		i := slices.IndexFunc(upd.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget })
		if i >= 0 {
			upd.Status.Conditions[i] = cond
		} else {
			upd.Status.Conditions = append(upd.Status.Conditions, cond)
		}
		_, uerr := a.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if !apierrors.IsConflict(uerr) {
			return uerr
		}
		fresh, gerr := a.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		if fresh.UID != pod.UID {
			return errReplaced
		}
		cur = fresh
		return uerr
	})
	switch {
	case err == nil:
		return markWritten, nil
	case apierrors.IsNotFound(err), err == errReplaced:
		return markGone, nil
	default:
		return markWritten, fmt.Errorf("marking pod failed: %w", err)
	}
}

var errReplaced = fmt.Errorf("pod was replaced by a new one with the same name")

// AddTaint adds the taint to the node unless a taint with that key is
// already there.
func (a *Actuator) AddTaint(ctx context.Context, node *v1.Node, taint v1.Taint, why string) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node), "taint", taint.Key)
	if a.DryRun {
		logger.Info("Dry run: would taint node", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Dry run: would add taint %s: %s", taint.ToString(), why)
		return nil
	}
	changed := false
	err := a.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		if nodeutil.HasTaint(n, taint.Key) {
			return false
		}
		t := taint
		if t.TimeAdded == nil {
			now := metav1.NewTime(a.now())
			t.TimeAdded = &now
		}
		n.Spec.Taints = append(n.Spec.Taints, t)
		changed = true
		return true
	})
	if err != nil {
		return fmt.Errorf("adding taint %s to node %s: %w", taint.Key, node.Name, err)
	}
	if changed {
		logger.Info("Tainted node", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Added taint %s: %s", taint.ToString(), why)
	}
	return nil
}

// RemoveTaint removes every taint with the key from the node.
func (a *Actuator) RemoveTaint(ctx context.Context, node *v1.Node, key, why string) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node), "taint", key)
	if a.DryRun {
		logger.Info("Dry run: would remove taint", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventUntainted, "Dry run: would remove taint %s: %s", key, why)
		return nil
	}
	changed := false
	err := a.updateNode(ctx, node.Name, func(n *v1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == key })
		changed = len(n.Spec.Taints) != before
		return changed
	})
	if err != nil {
		return fmt.Errorf("removing taint %s from node %s: %w", key, node.Name, err)
	}
	if changed {
		logger.Info("Removed taint", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventUntainted, "Removed taint %s: %s", key, why)
	}
	return nil
}

// SetNodeAnnotation sets (value non-nil) or removes (nil) one annotation.
func (a *Actuator) SetNodeAnnotation(ctx context.Context, node *v1.Node, key string, value *string) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node), "annotation", key)
	if a.DryRun {
		logger.Info("Dry run: would set node annotation", "value", value)
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
	if err != nil {
		return fmt.Errorf("encoding annotation patch: %w", err)
	}
	if _, err := a.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating node %s: %w", node.Name, err)
	}
	logger.V(2).Info("Set node annotation", "value", value)
	return nil
}

// ReleaseVolumes removes the named volumes from node.status.volumesInUse
// (and, when alsoAttached, from node.status.volumesAttached). The
// attach/detach controller then no longer waits for the dead kubelet to
// report them unmounted and detaches at once. It returns the names it
// removed.
func (a *Actuator) ReleaseVolumes(ctx context.Context, node *v1.Node, vols []v1.UniqueVolumeName, alsoAttached bool, why string) ([]v1.UniqueVolumeName, error) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if len(vols) == 0 {
		return nil, nil
	}
	if a.DryRun {
		logger.Info("Dry run: would release volumes from node status", "volumes", vols, "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventVolumesReleased, "Dry run: would release volumes %v: %s", vols, why)
		return nil, nil
	}
	var removed []v1.UniqueVolumeName
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		removed = nil
		n, err := a.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.UID != node.UID {
			return nil // node was recreated: nothing of ours to release
		}
		n.Status.VolumesInUse = slices.DeleteFunc(n.Status.VolumesInUse, func(v v1.UniqueVolumeName) bool {
			if slices.Contains(vols, v) {
				removed = append(removed, v)
				return true
			}
			return false
		})
		if alsoAttached {
			n.Status.VolumesAttached = slices.DeleteFunc(n.Status.VolumesAttached, func(v v1.AttachedVolume) bool {
				if slices.Contains(vols, v.Name) {
					if !slices.Contains(removed, v.Name) {
						removed = append(removed, v.Name)
					}
					return true
				}
				return false
			})
		}
		if len(removed) == 0 {
			return nil
		}
		_, err = a.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("releasing volumes from node %s status: %w", node.Name, err)
	}
	if len(removed) > 0 {
		logger.Info("Released volumes from node status", "volumes", removed, "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventVolumesReleased, "Released volumes %v from node status: %s", removed, why)
	}
	return removed, nil
}

// updateNode applies mutate to the latest node and writes it back, retrying
// on conflicts. mutate returns false when nothing needs to change.
func (a *Actuator) updateNode(ctx context.Context, name string, mutate func(*v1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !mutate(n) {
			return nil
		}
		_, err = a.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// PodEvent records an Event on a pod (also in dry-run mode: it changes no
// state the controllers act on).
func (a *Actuator) PodEvent(pod *v1.Pod, eventType, reason, message string) {
	a.Recorder.Event(pod, eventType, reason, message)
}
