// Package tainteviction is fenceline-controller's storage-aware
// replacement of kube-controller-manager's taint-eviction-controller
// (KEP-3902), behind the TaintEviction feature gate. Its pure decisions:
// EvictAt, when the node's NoExecute taints evict a pod, with upstream's
// rules (k/k pkg/controller/tainteviction) except that the clock starts at
// the taint's timeAdded rather than when a controller first saw it, so a
// restart or a leader change never extends a pod's stay on a dead node;
// and DecidePod, what to do with the pod then (wait, evict gracefully as
// upstream does, hold a stateful pod of a dead node until it is cut off
// from storage, force-delete it then). The Controller acts on them,
// behind a storm guard shared with node-fencing and a self-check that
// stands down while upstream's controller is still running.
package tainteviction

import (
	"fmt"
	"math"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Eviction is when the NoExecute taints of a pod's node evict it.
type Eviction struct {
	// Never: no NoExecute taint, or every one tolerated forever.
	Never bool
	// At is the eviction time when not Never; At at or before now means
	// now (an untolerated taint gives the start time itself).
	At time.Time
	// Why says it in words, for Events and logs.
	Why string
}

// NoExecuteTaints returns the taints with effect NoExecute, the only ones
// that evict.
func NoExecuteTaints(taints []v1.Taint) []v1.Taint {
	var out []v1.Taint
	for _, t := range taints {
		if t.Effect == v1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

// matchingTolerations is upstream's GetMatchingTolerations: whether every
// taint is tolerated, and for each taint the first toleration that
// tolerates it.
func matchingTolerations(taints []v1.Taint, tolerations []v1.Toleration) (bool, []v1.Toleration) {
	if len(taints) == 0 {
		return true, nil
	}
	if len(tolerations) == 0 {
		return false, nil
	}
	var used []v1.Toleration
	for i := range taints {
		matched := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(klog.Background(), &taints[i], false) {
				used = append(used, tolerations[j])
				matched = true
				break
			}
		}
		if !matched {
			return false, nil
		}
	}
	return true, used
}

// MinTolerationTime is upstream's getMinTolerationTime: 0 (evict now) for
// no tolerations or any tolerationSeconds of zero or less, -1 (never) when
// none sets tolerationSeconds, else the smallest tolerationSeconds.
func MinTolerationTime(tolerations []v1.Toleration) time.Duration {
	if len(tolerations) == 0 {
		return 0
	}
	minSeconds := int64(math.MaxInt64)
	for _, t := range tolerations {
		if t.TolerationSeconds == nil {
			continue
		}
		if *t.TolerationSeconds <= 0 {
			return 0
		}
		minSeconds = min(minSeconds, *t.TolerationSeconds)
	}
	if minSeconds == math.MaxInt64 {
		return -1
	}
	return time.Duration(minSeconds) * time.Second
}

// EvictAt is the single place that states when a pod is evicted by its
// node's taints (the default path, before any storage-aware hold). seen
// gives when the controller first observed a taint, the fallback for a
// taint without timeAdded.
//
// The clock starts at the latest of: the earliest timeAdded of the node's
// NoExecute taints, and the pod's binding to the node (its PodScheduled
// transition, else its creation), because a pod that arrived on an already
// tainted node gets its whole toleration from its arrival, as upstream
// gives it from when it first processes the pod.
func EvictAt(pod *v1.Pod, taints []v1.Taint, seen func(v1.Taint) time.Time) Eviction {
	noExec := NoExecuteTaints(taints)
	if len(noExec) == 0 {
		return Eviction{Never: true, Why: "node has no NoExecute taint"}
	}
	start := taintStart(noExec, seen)
	if bound := boundAt(pod); bound.After(start) {
		start = bound
	}
	all, used := matchingTolerations(noExec, pod.Spec.Tolerations)
	if !all {
		return Eviction{At: start, Why: fmt.Sprintf("pod does not tolerate every NoExecute taint of its node (%s)", taintList(noExec))}
	}
	d := MinTolerationTime(used)
	if d < 0 {
		return Eviction{Never: true, Why: "pod tolerates the node's NoExecute taints forever"}
	}
	return Eviction{At: start.Add(d), Why: fmt.Sprintf("pod tolerates the node's NoExecute taints (%s) for %s from %s", taintList(noExec), d, start.UTC().Format(time.RFC3339))}
}

// taintStart is the earliest time a NoExecute taint was added: its
// timeAdded, else when the controller first saw it (seen).
//
// timeAdded is stored with a second's resolution, so the taint was really
// added somewhere in [timeAdded, timeAdded+1s). The first sighting, when
// it falls in that second (a live watch sees a taint within
// milliseconds), is the closer bound; otherwise (a controller started
// after the taint) the end of that second is. Either way a pod never gets
// less than its tolerationSeconds, and at most a second more.
func taintStart(taints []v1.Taint, seen func(v1.Taint) time.Time) time.Time {
	var start time.Time
	for _, t := range taints {
		at := time.Time{}
		if seen != nil {
			at = seen(t)
		}
		if t.TimeAdded != nil {
			lo := t.TimeAdded.Time
			switch hi := lo.Add(time.Second); {
			case at.IsZero(), at.Before(lo):
				at = lo
			case at.After(hi):
				at = hi
			}
		}
		if !at.IsZero() && (start.IsZero() || at.Before(start)) {
			start = at
		}
	}
	return start
}

// boundAt is when the pod was bound to its node: the PodScheduled
// condition's transition, else its creation.
func boundAt(pod *v1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return pod.CreationTimestamp.Time
}

func taintList(taints []v1.Taint) string {
	out := make([]string, 0, len(taints))
	for _, t := range taints {
		out = append(out, t.ToString())
	}
	return strings.Join(out, ", ")
}
