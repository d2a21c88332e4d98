package tainteviction

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
)

// input gathers what DecidePod reads about one pod: whether it is
// stateful (see Stateful) and why its node counts as cut off. safe reports
// that every stateful volume's driver opted into safe detach.
func (c *Controller) input(node *v1.Node, pod *v1.Pod, now time.Time) (in PodInput, safe bool, err error) {
	return GatherPod(c.volumes, node, pod, c.seen.At(node.Name), now)
}

// GatherPod reads DecidePod's input for pod on node: its volumes, classified
// by resolver (the controller's informers, or explain's snapshot), only
// when a NoExecute taint may evict it; seen says since when each taint
// counts. safe reports that every stateful volume is a safe-detach driver's.
func GatherPod(resolver *podvolumes.Resolver, node *v1.Node, pod *v1.Pod, seen func(v1.Taint) time.Time, now time.Time) (in PodInput, safe bool, err error) {
	in = PodInput{Pod: pod, Node: node, Seen: seen, Now: now}
	if len(NoExecuteTaints(node.Spec.Taints)) == 0 {
		return in, false, nil // nothing evicts: no need to look at volumes
	}
	vols, err := resolver.PodVolumes(pod)
	if err != nil {
		return in, false, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	in.Stateful, safe = Stateful(vols)
	in.SafeDetach = safe
	in.CutOff = cutoff.NodeReason(node, safe)
	return in, safe, nil
}

// Stateful reports whether a pod with these volumes is stateful for
// taint-eviction: it has a volume that one node at a time may write and
// that lives on after the pod (a CSI or other PersistentVolume that is not
// ReadWriteMany or ReadOnlyMany only), or one that cannot be resolved yet
// (the safe reading of a missing input). Node-local, inline and scratch
// volumes do not count: they do not move with the pod. allSafeDetach
// reports that every such volume is a CSI volume of a safe-detach driver.
func Stateful(vols []podvolumes.Volume) (stateful, allSafeDetach bool) {
	allSafeDetach = true
	for _, v := range vols {
		switch v.Kind {
		case podvolumes.KindCSI, podvolumes.KindOther, podvolumes.KindUnresolved:
			if v.RWX || v.ROXOnly {
				continue
			}
			stateful = true
			allSafeDetach = allSafeDetach && v.Kind == podvolumes.KindCSI && v.SafeDetach
		}
	}
	return stateful, stateful && allSafeDetach
}

// firstSeen remembers when this process first saw each NoExecute taint of
// each node, the clock of a taint added without timeAdded (kubectl taint).
type firstSeen struct {
	now func() time.Time
	mu  sync.Mutex
	at  map[string]map[string]time.Time // node -> key:effect -> time
}

func newFirstSeen(now func() time.Time) *firstSeen {
	return &firstSeen{now: now, at: map[string]map[string]time.Time{}}
}

func taintID(t v1.Taint) string { return t.Key + ":" + string(t.Effect) }

// Observe records the node's NoExecute taints not seen before and forgets
// those gone; a nil node (deleted) is forgotten (nodequeue.NodeObserver).
func (s *firstSeen) Observe(name string, node *v1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var taints []v1.Taint
	if node != nil {
		taints = NoExecuteTaints(node.Spec.Taints)
	}
	if len(taints) == 0 {
		delete(s.at, name)
		return
	}
	old := s.at[name]
	cur := make(map[string]time.Time, len(taints))
	for _, t := range taints {
		id := taintID(t)
		if at, ok := old[id]; ok {
			cur[id] = at
		} else {
			cur[id] = s.now()
		}
	}
	s.at[name] = cur
}

// At returns the lookup EvictAt calls for a taint of the node without
// timeAdded; a taint never observed counts from now.
func (s *firstSeen) At(node string) func(v1.Taint) time.Time {
	return func(t v1.Taint) time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		if at, ok := s.at[node][taintID(t)]; ok {
			return at
		}
		return s.now()
	}
}

// podKey names a pod as upstream's eviction queue does.
type podKey struct{ namespace, name string }

func keyOf(pod *v1.Pod) podKey { return podKey{pod.Namespace, pod.Name} }

func (k podKey) String() string { return k.namespace + "/" + k.name }

// actionEvicted marks a tracked pod whose eviction this controller made:
// its disappearance is no cancellation.
const actionEvicted Action = "Evicted"

// podState is a pod with an eviction scheduled (ActionWait), held, or
// made (actionEvicted).
type podState struct {
	action Action
	why    string
}

// tracker keeps, per node, the pods with an eviction scheduled or held, so
// that a sync can tell upstream's "Cancelling deletion" Event when one is
// no longer due, and announce a hold once rather than at every sync.
type tracker struct {
	mu    sync.Mutex
	nodes map[string]map[podKey]podState
	// held counts the held pods of all nodes (the gauge), kept by settle
	// so that a sync's cost does not grow with the cluster.
	held int
}

func newTracker() *tracker { return &tracker{nodes: map[string]map[podKey]podState{}} }

// has reports whether the node has tracked pods.
func (t *tracker) has(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.nodes[node]) > 0
}

func heldIn(states map[podKey]podState) int {
	n := 0
	for _, s := range states {
		if s.action == ActionHold {
			n++
		}
	}
	return n
}

// settle replaces the node's tracked pods with states and records the
// Events of the difference: a scheduled or held eviction that is no longer
// due is cancelled, a hold that is new (or has a new reason) is announced.
func (c *Controller) settle(ctx context.Context, node string, states map[podKey]podState) {
	c.tracker.mu.Lock()
	old := c.tracker.nodes[node]
	if len(states) == 0 {
		delete(c.tracker.nodes, node)
	} else {
		c.tracker.nodes[node] = states
	}
	c.tracker.held += heldIn(states) - heldIn(old)
	held := c.tracker.held
	c.tracker.mu.Unlock()
	c.metrics.setHeld(held)
	logger := klog.FromContext(ctx)
	for k, was := range old {
		if _, still := states[k]; !still && was.action != actionEvicted && c.notBeingDeleted(k) {
			c.act.Recorder.Eventf(podRef(k), v1.EventTypeNormal, actuator.EventTaintManagerEviction, "Cancelling deletion of Pod %s", k)
			logger.V(2).Info("Eviction cancelled", "pod", k.String(), "was", was.action)
		}
	}
	for k, s := range states {
		if s.action == ActionHold && old[k] != s {
			c.act.Recorder.Eventf(podRef(k), v1.EventTypeNormal, EventHeld, "Eviction held: %s", s.why)
			logger.Info("Eviction held", "pod", k.String(), "why", s.why)
		}
	}
}

// notBeingDeleted reports whether a pod whose eviction is no longer due
// was cancelled, not deleted by someone else: it is gone from the cache
// (upstream cancels on a pod's deletion too) or not terminating.
func (c *Controller) notBeingDeleted(k podKey) bool {
	obj, exists, err := c.pods.GetByKey(k.String())
	if err != nil || !exists {
		return true
	}
	pod, ok := obj.(*v1.Pod)
	return ok && pod.DeletionTimestamp == nil
}

func podRef(k podKey) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: k.namespace, Name: k.name}
}
