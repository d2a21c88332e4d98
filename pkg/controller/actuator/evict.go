package actuator

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Upstream taint eviction's pod condition and Event, kept word for word so
// that tooling written for kube-controller-manager's taint-eviction-
// controller (alerts on the Event reason, Job pod failure policies on the
// condition reason) reads Fenceline's evictions the same way.
const (
	// TaintEvictionDisruptionReason is the DisruptionTarget reason.
	TaintEvictionDisruptionReason = "DeletionByTaintManager"
	// TaintEvictionDisruptionMessage is the DisruptionTarget message.
	TaintEvictionDisruptionMessage = "Taint manager: deleting due to NoExecute taint"
	// EventTaintManagerEviction is the reason of the Events that mark a
	// pod for deletion and cancel a scheduled deletion.
	EventTaintManagerEviction = "TaintManagerEviction"
)

// Eviction explains one graceful eviction.
type Eviction struct {
	// Message says why, for the log.
	Message string
	// Recheck is the controller's decision, run again on the fresh node
	// and pod before the condition is written and again if the pod
	// changed before the delete. Required: without it nothing is written.
	Recheck PodCheck
}

// EvictPod evicts a pod the way kube-controller-manager's taint eviction
// does: a DisruptionTarget condition (reason DeletionByTaintManager), the
// TaintManagerEviction Event, then a delete with the pod's own grace
// period, so the kubelet stops it gracefully. Unlike upstream, the delete
// carries a UID precondition (a StatefulSet's replacement with the same
// name is never deleted) and the resourceVersion the decision was re-made
// on: a pod that changed in between is read again and decided again. A pod
// already gone or replaced counts as evicted.
func (a *Actuator) EvictPod(ctx context.Context, pod *v1.Pod, e Eviction) error {
	const what = "evict pod"
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "uid", pod.UID)
	if a.DryRun {
		logger.Info("Dry run: would evict pod", "message", e.Message)
		a.Recorder.Eventf(pod, v1.EventTypeNormal, EventTaintManagerEviction, "Dry run: would mark for deletion Pod %s/%s: %s", pod.Namespace, pod.Name, e.Message)
		return nil
	}
	marked, err := a.markDisruption(ctx, what, pod, e.Recheck)
	if err == nil && marked == nil {
		logger.V(2).Info("Pod already gone or replaced")
		return nil
	}
	gone := false
	if err == nil {
		a.Recorder.Eventf(pod, v1.EventTypeNormal, EventTaintManagerEviction, "Marking for deletion Pod %s/%s", pod.Namespace, pod.Name)
		gone, err = a.deletePod(ctx, what, marked, e.Recheck, nil)
	}
	if IsDecisionChanged(err) {
		a.decisionChanged(ctx, pod, err)
		return err
	}
	if err != nil {
		return fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	logger.Info("Evicted pod", "message", e.Message, "alreadyGone", gone)
	return nil
}

// markDisruption re-decides on the fresh node and pod and adds upstream's
// DisruptionTarget condition (not the Failed phase: the pod is still
// running and stops gracefully). It returns the pod as written, or nil when
// the pod is gone or replaced.
func (a *Actuator) markDisruption(ctx context.Context, what string, pod *v1.Pod, check PodCheck) (*v1.Pod, error) {
	written, err := a.updatePodStatus(ctx, what, pod, check, func(p *v1.Pod) bool {
		if hasTaintEvictionDisruption(p) {
			return false
		}
		setDisruptionTarget(p, v1.PodCondition{ObservedGeneration: p.Generation, Reason: TaintEvictionDisruptionReason,
			Message: TaintEvictionDisruptionMessage, LastTransitionTime: metav1.NewTime(a.now())})
		return true
	})
	switch {
	case apierrors.IsNotFound(err), IsReplaced(err):
		return nil, nil
	case err != nil && !IsDecisionChanged(err):
		return nil, fmt.Errorf("adding the DisruptionTarget condition: %w", err)
	}
	return written, err
}

func hasTaintEvictionDisruption(pod *v1.Pod) bool {
	return slices.ContainsFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == TaintEvictionDisruptionReason
	})
}
