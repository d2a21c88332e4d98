// Package actuator performs the writes the Fenceline controllers decide on:
// force-deleting pods, tainting and untainting nodes, releasing volumes from
// node status and recording state on nodes. Every write is announced by an
// Event and a log line, and none happens in dry-run mode. Keeping all writes
// here keeps the controllers' policy code free of I/O.
//
// A controller decides from its informer caches, which lag behind the API
// server. So every write takes the controller's pure decision as a re-check
// callback and runs it again on the object as the API server has it at the
// moment of the write: a fresh read inside the conflict-retry loop, or a
// resourceVersion precondition that fails when the object changed. A
// kubelet that reports in between the decision and the write therefore
// makes the controller decide again; it is never overwritten.
package actuator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/metrics"
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
	// EventDecisionChanged: a write was abandoned because the decision,
	// made again on fresh data at write time, no longer holds.
	EventDecisionChanged = "FencelineDecisionChanged"
)

// PodCheck re-decides a force deletion at write time, on the pod as it is
// about to be written and its node as just read from the API server (nil
// when the node is gone). Controllers pass their pure decision function.
type PodCheck func(node *v1.Node, pod *v1.Pod) (ok bool, why string)

// NodeCheck re-decides a node write on the node as just read from the API
// server. Controllers pass their pure decision function.
type NodeCheck func(node *v1.Node) (ok bool, why string)

// DecisionChangedError reports a write that was not made because the
// decision, made again on fresh data, no longer holds. The controller looks
// again (the queue retries the node), so the new state is decided on.
type DecisionChangedError struct {
	// What names the write, Why is the fresh decision's reason.
	What, Why string
}

func (e *DecisionChangedError) Error() string {
	return fmt.Sprintf("%s not done: decision changed on fresh data: %s", e.What, e.Why)
}

// IsDecisionChanged reports whether err is (or wraps) a DecisionChangedError.
func IsDecisionChanged(err error) bool {
	var d *DecisionChangedError
	return errors.As(err, &d)
}

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
	// Recheck is the controller's decision, run again on fresh data
	// before the pod is marked Failed and again if the pod changed before
	// the delete. Required: without it nothing is written.
	Recheck PodCheck
	// Node is the pod's node as read from the API server (ReadNode), for
	// the first re-check instead of a read of its own: a caller that must
	// write before it deletes (the fence intent) reads the node beside
	// that write, which saves the deletion a round trip. The read must
	// have begun after the caller's decision, so it is fresh to that
	// decision as the re-check's own would be. Every later re-check, after
	// a conflict, reads the node again. nil (or a read of another node):
	// the first re-check reads too.
	Node *FreshNode
}

// FreshNode is a node as read from the API server at one moment, for a
// write-time re-check.
type FreshNode struct {
	// Name is the node that was read.
	Name string
	// Node is what the API server returned; nil when the node does not
	// exist.
	Node *v1.Node
}

// ReadNode reads the node from the API server for a Deletion's Node. A node
// that does not exist is a FreshNode without Node: the re-check decides on
// that. In dry-run mode it reads nothing and returns nil, since
// ForceDeletePod then re-checks nothing.
func (a *Actuator) ReadNode(ctx context.Context, name string) (*FreshNode, error) {
	if a.DryRun {
		return nil, nil
	}
	n, err := a.readNode(ctx, name)
	if err != nil {
		return nil, err
	}
	return &FreshNode{Name: name, Node: n}, nil
}

// readNode reads the node fresh; nil without error when it does not exist.
func (a *Actuator) readNode(ctx context.Context, name string) (*v1.Node, error) {
	n, err := a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node %s to re-check the decision: %w", name, err)
	}
	return n, nil
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
// Before marking, d.Recheck runs on the pod and on a fresh read of its
// node (d.Node, when the caller made it); the delete carries the marked
// pod's resourceVersion, and if the pod changed in between (a kubelet
// reporting in) the decision is made again on the fresh pod and node. When
// it no longer holds, nothing more is written and a *DecisionChangedError
// is returned.
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
	mark, marked, err := a.markFailed(ctx, pod, d.Recheck, d.Node, d.Message)
	if err == nil && mark == markGone {
		logger.V(2).Info("Pod already gone or replaced")
		return nil
	}
	if err == nil && mark == markAlreadyTerminal {
		// Nothing was written yet: decide on fresh data before the delete.
		err = a.recheckPodOn(ctx, "force-delete pod", pod, d.Recheck, d.Node)
	}
	gone := false
	if err == nil {
		gone, err = a.deleteChecked(ctx, marked, d.Recheck)
		if gone && mark != markWritten {
			logger.V(2).Info("Pod already gone or replaced")
			return nil
		}
	}
	if IsDecisionChanged(err) {
		a.decisionChanged(ctx, pod, err)
		return err
	}
	if err != nil {
		a.Metrics.ObserveForceDeleteError(pod.Namespace, d.Reason)
		a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleteFail, "Force deletion failed: %v", err)
		return fmt.Errorf("force-deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.Metrics.ObserveForceDelete(pod.Namespace, d.Reason, d.Trigger, a.now())
	if gone {
		a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleted,
			"Force-deleted: %s (marked Failed; another client's pending delete then removed it at once)", d.Message)
		logger.Info("Force-deleted pod: marked Failed, another client's delete completed first", "message", d.Message)
		return nil
	}
	a.Recorder.Eventf(pod, v1.EventTypeWarning, EventForceDeleted, "Force-deleted: %s", d.Message)
	logger.Info("Force-deleted pod", "message", d.Message)
	return nil
}

// decisionChanged records an abandoned write: a Normal Event on the object
// (users see why nothing happened), a log line and the metric.
func (a *Actuator) decisionChanged(ctx context.Context, obj runtime.Object, err error) {
	var d *DecisionChangedError
	if !errors.As(err, &d) {
		return
	}
	klog.FromContext(ctx).Info("Write abandoned: decision changed on fresh data", "write", d.What, "why", d.Why)
	a.Recorder.Eventf(obj, v1.EventTypeNormal, EventDecisionChanged, "Did not %s: %s", d.What, d.Why)
	a.Metrics.ObserveDecisionChanged(d.What)
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

// markFailed re-decides on the pod and a fresh read of its node (node, when
// the caller read it), then sets phase Failed and the DisruptionTarget
// condition, as upstream pod GC does, so that Job controllers and
// disruption budgets see why the pod went away. The status update carries
// the pod's resourceVersion: on a conflict the pod and its node are read
// again and the decision made again. It returns the pod as written (or as
// found, when it was terminal already).
func (a *Actuator) markFailed(ctx context.Context, pod *v1.Pod, check PodCheck, node *FreshNode, message string) (markOutcome, *v1.Pod, error) {
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return markAlreadyTerminal, pod, nil
	}
	written, err := a.updatePodStatusOn(ctx, "force-delete pod", pod, check, node, func(p *v1.Pod) bool {
		p.Status.Phase = v1.PodFailed
		setDisruptionTarget(p, v1.PodCondition{Reason: DisruptionReason, Message: message, LastTransitionTime: metav1.NewTime(a.now())})
		return true
	})
	switch {
	case err == nil:
		return markWritten, written, nil
	case apierrors.IsNotFound(err), errors.Is(err, errReplaced):
		return markGone, nil, nil
	case IsDecisionChanged(err):
		return markWritten, nil, err
	default:
		return markWritten, nil, fmt.Errorf("marking pod failed: %w", err)
	}
}

// deleteChecked deletes the pod with grace period 0, preconditioned on its
// UID and on the resourceVersion the decision was made on. If the pod
// changed since, it is read again and the decision made again before the
// next attempt. gone reports that the pod vanished or was replaced first.
func (a *Actuator) deleteChecked(ctx context.Context, pod *v1.Pod, check PodCheck) (gone bool, err error) {
	return a.deletePod(ctx, "force-delete pod", pod, check, new(int64))
}

// deletePod deletes the pod with the given grace period (nil: the pod's
// own), preconditioned on its UID and on the resourceVersion the decision
// was made on, re-deciding on the fresh pod after every conflict.
func (a *Actuator) deletePod(ctx context.Context, what string, pod *v1.Pod, check PodCheck, grace *int64) (gone bool, err error) {
	cur := pod
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rv := cur.ResourceVersion
		pre := &metav1.Preconditions{UID: &pod.UID}
		if rv != "" {
			pre.ResourceVersion = &rv
		}
		derr := a.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: grace,
			Preconditions:      pre,
		})
		if !apierrors.IsConflict(derr) {
			return derr
		}
		fresh, node, gerr := a.freshPodAndNode(ctx, pod)
		if gerr != nil {
			return gerr
		}
		if err := a.recheckPodOn(ctx, what, fresh, check, node); err != nil {
			return err
		}
		cur = fresh
		return derr
	})
	if apierrors.IsNotFound(err) || errors.Is(err, errReplaced) {
		return true, nil
	}
	return false, err
}

// updatePodStatus re-decides on the pod and a fresh read of its node, then
// writes the status mutate makes (nothing when it reports no change),
// carrying the pod's resourceVersion: on a conflict the pod is read again
// and the decision made again. It returns the pod as written; NotFound or
// errReplaced when the pod went away.
func (a *Actuator) updatePodStatus(ctx context.Context, what string, pod *v1.Pod, check PodCheck, mutate func(*v1.Pod) bool) (*v1.Pod, error) {
	return a.updatePodStatusOn(ctx, what, pod, check, nil, mutate)
}

// updatePodStatusOn is updatePodStatus whose first re-check decides on
// node, the caller's fresh read, when it is of the pod's node. A retry
// after a conflict reads the node again: the read the caller made may
// predate whatever changed the pod.
func (a *Actuator) updatePodStatusOn(ctx context.Context, what string, pod *v1.Pod, check PodCheck, node *FreshNode, mutate func(*v1.Pod) bool) (*v1.Pod, error) {
	cur, written := pod, pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		read := node
		node = nil // used once: every retry reads the node again
		if err := a.recheckPodOn(ctx, what, cur, check, read); err != nil {
			return err
		}
		upd := cur.DeepCopy()
		if !mutate(upd) {
			written = cur
			return nil
		}
		res, uerr := a.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if uerr == nil {
			written = res
		}
		if !apierrors.IsConflict(uerr) {
			return uerr
		}
		fresh, read, gerr := a.freshPodAndNode(ctx, pod)
		if gerr != nil {
			return gerr
		}
		cur, node = fresh, read
		return uerr
	})
	return written, err
}

// freshPodAndNode reads the pod and its node again at once, after a
// conflict: one round trip, not two. Both reads start after the conflict,
// so the node read is as fresh for the next try's re-check as one of its
// own would be.
func (a *Actuator) freshPodAndNode(ctx context.Context, pod *v1.Pod) (*v1.Pod, *FreshNode, error) {
	var (
		g     errgroup.Group
		fresh *v1.Pod
		node  *FreshNode
	)
	g.Go(func() (err error) { fresh, err = a.freshPod(ctx, pod); return err })
	if name := pod.Spec.NodeName; name != "" {
		g.Go(func() error {
			n, err := a.readNode(ctx, name)
			node = &FreshNode{Name: name, Node: n}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return fresh, node, nil
}

// setDisruptionTarget sets the pod's DisruptionTarget condition to True
// with cond's reason, message and time.
func setDisruptionTarget(p *v1.Pod, cond v1.PodCondition) {
	cond.Type, cond.Status = v1.DisruptionTarget, v1.ConditionTrue
	if i := slices.IndexFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget }); i >= 0 {
		p.Status.Conditions[i] = cond
		return
	}
	p.Status.Conditions = append(p.Status.Conditions, cond)
}

// IsReplaced reports whether err says the pod was replaced by a new one
// with the same name.
func IsReplaced(err error) bool { return errors.Is(err, errReplaced) }

// freshPod reads the pod again; errReplaced when a new pod took its name.
func (a *Actuator) freshPod(ctx context.Context, pod *v1.Pod) (*v1.Pod, error) {
	fresh, err := a.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if fresh.UID != pod.UID {
		return nil, errReplaced
	}
	return fresh, nil
}

// recheckPodOn runs the decision of the write named what on the pod and
// its node: read, a fresh read of the node made after the decision, when it
// is of the pod's node; otherwise a read of its own. A missing check
// refuses: without a decision nothing is written.
func (a *Actuator) recheckPodOn(ctx context.Context, what string, pod *v1.Pod, check PodCheck, read *FreshNode) error {
	if check == nil {
		return &DecisionChangedError{What: what, Why: "no decision to re-check at write time"}
	}
	var node *v1.Node
	switch {
	case pod.Spec.NodeName == "":
	case read != nil && read.Name == pod.Spec.NodeName:
		node = read.Node
	default:
		n, err := a.readNode(ctx, pod.Spec.NodeName)
		if err != nil {
			return err
		}
		node = n
	}
	if ok, why := check(node, pod); !ok {
		return &DecisionChangedError{What: what, Why: why}
	}
	return nil
}

var errReplaced = errors.New("pod was replaced by a new one with the same name")

// PodEvent records an Event on a pod (also in dry-run mode: it changes no
// state the controllers act on).
func (a *Actuator) PodEvent(pod *v1.Pod, eventType, reason, message string) {
	a.Recorder.Event(pod, eventType, reason, message)
}
