// Package podutil holds pure helpers about Pods that the Fenceline
// controllers share: whether a pod is terminating, already force-deleted, a
// mirror pod, or tolerates a taint, and when its deletion was requested.
package podutil

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// IsTerminating reports whether the pod has a deletion timestamp.
func IsTerminating(pod *v1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp != nil
}

// TerminatingChanged reports whether a pod update started (or, for a
// recreated object, ended) its termination: the only pod update the
// terminating-pod controllers react to, so that status churn on live pods
// does not requeue their node.
func TerminatingChanged(old, cur *v1.Pod) bool {
	return IsTerminating(old) != IsTerminating(cur)
}

// IsForceDeleted reports whether the pod was already deleted with a grace
// period of 0. Such a pod only remains in the API because of finalizers;
// deleting it again would change nothing, so controllers skip it instead of
// looping on it.
func IsForceDeleted(pod *v1.Pod) bool {
	return IsTerminating(pod) && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
}

// ToleratesTaint reports whether the pod tolerates the taint.
func ToleratesTaint(pod *v1.Pod, taint *v1.Taint) bool {
	if pod == nil || taint == nil {
		return false
	}
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].ToleratesTaint(klog.Background(), taint, false) {
			return true
		}
	}
	return false
}

// DeletionRequestedAt returns when the pod's deletion was requested: the
// deletion timestamp minus the grace period the API server added to it.
func DeletionRequestedAt(pod *v1.Pod) (time.Time, bool) {
	if !IsTerminating(pod) {
		return time.Time{}, false
	}
	t := pod.DeletionTimestamp.Time
	if pod.DeletionGracePeriodSeconds != nil {
		t = t.Add(-time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second)
	}
	return t, true
}
