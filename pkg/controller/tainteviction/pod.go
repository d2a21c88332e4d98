package tainteviction

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// EvictWhenAnnotation on a pod names a pod condition type that must be
// True before the taint eviction may evict it (story 3 of KEP-3902: an
// operator that checkpoints first). The hold applies to the graceful
// eviction of a pod on a live node; it never keeps a pod of a dead,
// cut-off node, whose pod cannot run anyway.
const EvictWhenAnnotation = names.Domain + "/evict-when-condition"

// Action is what to do with one pod.
type Action string

// The actions of a Decision.
const (
	// ActionNone: nothing to do for the pod (no eviction due, ever).
	ActionNone Action = ""
	// ActionWait: an eviction is due at Decision.At.
	ActionWait Action = "Wait"
	// ActionEvict: evict gracefully, as upstream does (DisruptionTarget,
	// then a delete with the pod's grace period).
	ActionEvict Action = "Evict"
	// ActionForceDelete: the node is cut off from storage; delete at once
	// (grace 0, UID precondition), as pod GC does for out-of-service.
	ActionForceDelete Action = "ForceDelete"
	// ActionHold: due, but not safe or not allowed yet; Decision.Why says
	// what it waits for.
	ActionHold Action = "Hold"
)

// PodInput is what DecidePod reads about one pod.
type PodInput struct {
	Pod *v1.Pod
	// Node is the pod's node, nil when it is gone.
	Node *v1.Node
	// Stateful: the pod uses a ReadWriteOnce or ReadWriteOncePod volume of
	// a CSI driver that attaches.
	Stateful bool
	// CutOff is why the node counts as cut off from the storage of the
	// pod's volumes (cutoff.NodeReason, with safe detach only when every
	// such volume's driver opted in). Fenced and out of service let
	// taint-eviction force-delete. Safe detach and force eviction have
	// controllers of their own with their own evidence (quarantine: the
	// attacher's heartbeat; force-eviction: the kubelet's Lease, and the
	// volumes recorded before the delete), which force-delete such pods.
	CutOff cutoff.Reason
	// SafeDetach: every stateful volume of the pod is a CSI volume of a
	// driver that opted into safe detach, so quarantine recovers the pod
	// once it is deleted (tainteviction.Stateful's allSafeDetach).
	SafeDetach bool
	// Seen gives when the controller first saw a taint without timeAdded.
	Seen func(v1.Taint) time.Time
	Now  time.Time
}

// Decision is the outcome of DecidePod.
type Decision struct {
	Action Action
	// At is when the eviction is (or was) due, for every action but
	// ActionNone.
	At  time.Time
	Why string
}

// DecidePod is the single place that states what Fenceline's taint
// eviction does with a pod. On a Ready node, and for a stateless pod on
// any node, it is upstream's rule (EvictAt, then a graceful eviction). A
// stateful pod on a node that is not Ready is never gracefully deleted
// into an endless Terminating: it is held until the node is known cut off
// from its storage (fenced, out of service), then force-deleted; on a node
// quarantined for safe detach or tainted for force eviction it is left to
// the controller of that path, which force-deletes it on its own evidence.
// A stateful pod whose volumes are all of safe-detach drivers, on a node
// not cut off yet, is evicted gracefully: quarantine recovers pods stuck
// terminating, and a held pod would never become one.
func DecidePod(in PodInput) Decision {
	pod, node := in.Pod, in.Node
	switch {
	case pod == nil:
		return Decision{Why: "pod is gone"}
	case node == nil:
		return Decision{Why: "node is gone; orphaned pods are pod GC's"}
	case pod.Spec.NodeName != node.Name:
		return Decision{Why: "pod is not bound to this node"}
	case podutil.IsTerminating(pod):
		return Decision{Why: "pod is already being deleted"}
	}
	e := EvictAt(pod, node.Spec.Taints, in.Seen)
	if e.Never {
		return Decision{Why: e.Why}
	}
	if in.Now.Before(e.At) {
		return Decision{Action: ActionWait, At: e.At, Why: e.Why}
	}
	due := func(a Action, format string, args ...any) Decision {
		return Decision{Action: a, At: e.At, Why: e.Why + "; " + fmt.Sprintf(format, args...)}
	}
	evict := func(why string) Decision {
		if c, ok := pod.Annotations[EvictWhenAnnotation]; ok && c == "" {
			return due(ActionHold, "the pod's %s annotation is empty: name the pod condition that must be True before the eviction, or remove the annotation", EvictWhenAnnotation)
		} else if ok && !podConditionTrue(pod, c) {
			return due(ActionHold, "the pod asks (%s) for condition %s to be True first", EvictWhenAnnotation, c)
		}
		if why != "" {
			return due(ActionEvict, "%s", why)
		}
		return Decision{Action: ActionEvict, At: e.At, Why: e.Why}
	}
	// A fenced node (its power read back Off) is down before
	// kube-controller-manager marks it NotReady, 50 s after its last
	// heartbeat by default: its stateful pods go at once, as on a node
	// that is not Ready.
	if !cutoff.NodeDown(node) || !in.Stateful {
		return evict("")
	}
	switch in.CutOff {
	case cutoff.ReasonFenced, cutoff.ReasonOutOfService:
		if nodeutil.IsReady(node) {
			return due(ActionForceDelete, "the node is fenced (%s=True: its power was read back Off) and cut off from the pod's storage (%s): deleting at once", names.FencingCompleteCondition, in.CutOff)
		}
		return due(ActionForceDelete, "the node is not Ready and cut off from the pod's storage (%s): deleting at once", in.CutOff)
	case cutoff.ReasonSafeDetach:
		return due(ActionHold, "the node is not Ready and quarantined for safe detach: quarantine force-deletes the pod once the attacher is proven to fence")
	case cutoff.ReasonForceEviction:
		return due(ActionHold, "the node is not Ready and force-evicted: force-eviction force-deletes the pod once the kubelet's Lease is stale, recording its volumes first")
	}
	if in.SafeDetach && in.CutOff == cutoff.ReasonNone {
		// Quarantine recovers a terminating pod of safe-detach drivers:
		// holding it here would leave quarantine nothing to act on.
		return evict("the node is not Ready and every stateful volume of the pod is of a safe-detach driver: the graceful delete hands the pod to quarantine, which force-deletes it once the node has been NotReady for its delay and the attacher is proven to fence")
	}
	return due(ActionHold, "the node is not Ready and not known cut off from the pod's ReadWriteOnce volumes: a graceful delete would hang Terminating, so the pod waits for the node to be fenced or put out of service")
}

func podConditionTrue(pod *v1.Pod, typ string) bool {
	for _, c := range pod.Status.Conditions {
		if string(c.Type) == typ {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
