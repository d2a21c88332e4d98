package chaos

import (
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	"fenceline.io/fenceline/pkg/names"
)

// NodeState is what the API said of a node at one resourceVersion: the
// parts the invariants judge.
type NodeState struct {
	RV   uint64
	Seen time.Time
	Name string
	// Ready is the Ready condition's status ("" when absent).
	Ready corev1.ConditionStatus
	// OutOfService is the value of the out-of-service taint, if any.
	OutOfService    *string
	Quarantined     bool
	ForceEvicted    bool
	FencingComplete bool
	// LyingFence is node fencing's mark of a node fenced on a lie: it was
	// seen alive with the boot ID it had when fenced.
	LyingFence bool
}

// Triggered reports whether the node carried a trigger for a force
// delete: out of service, fenced, quarantined or force-evicted.
func (s NodeState) Triggered() bool {
	return s.OutOfService != nil || s.FencingComplete || s.Quarantined || s.ForceEvicted
}

// PodDeletion is a pod's disappearance from the API.
type PodDeletion struct {
	// RV is the resourceVersion of the deletion; 0 when the watch missed
	// it (the informer's tombstone).
	RV uint64
	// LastRV, for a deletion the watch missed, is the resourceVersion of
	// the pod's last state the informer had: the deletion came after it.
	LastRV          uint64
	Seen            time.Time
	Namespace, Name string
	Node            string
	// Disruption is the reason of the pod's DisruptionTarget condition
	// when it was deleted (e.g. DeletionByTaintManager), if any.
	Disruption string
}

// RequestState is what the API said of a FencingRequest at one
// resourceVersion: its node and phase.
type RequestState struct {
	RV         uint64
	Seen       time.Time
	Name, Node string
	Phase      fencingv1alpha1.FencingPhase
	// Gone marks the request's deletion.
	Gone bool
}

// History records, through informers (which re-list and re-watch across
// API server restarts), the node states and pod deletions of an episode.
// A single etcd orders every write, so resourceVersions order the records
// across kinds.
type History struct {
	mu        sync.Mutex
	nodes     []NodeState
	deletions []PodDeletion
	requests  []RequestState
}

// Record starts recording until stop closes, and waits for the caches.
func Record(cs kubernetes.Interface, stop <-chan struct{}) *History {
	h := &History{}
	f := informers.NewSharedInformerFactory(cs, 0)
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.node(obj) },
		UpdateFunc: func(_, obj any) { h.node(obj) },
	})
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: h.podDeleted,
	})
	f.Start(stop)
	f.WaitForCacheSync(stop)
	return h
}

// RecordFencing also records the FencingRequests' phases, and waits for
// the cache; for episodes with the fencing API installed.
func (h *History) RecordFencing(cs versioned.Interface, stop <-chan struct{}) {
	f := fencinginformers.NewSharedInformerFactory(cs, 0)
	_, _ = f.Fencing().V1alpha1().FencingRequests().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.request(obj, false) },
		UpdateFunc: func(_, obj any) { h.request(obj, false) },
		DeleteFunc: func(obj any) { h.request(obj, true) },
	})
	f.Start(stop)
	f.WaitForCacheSync(stop)
}

func (h *History) request(obj any, gone bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	r, ok := obj.(*fencingv1alpha1.FencingRequest)
	if !ok {
		return
	}
	s := RequestState{RV: rv(r.ResourceVersion), Seen: time.Now(), Name: r.Name, Node: r.Spec.NodeName, Phase: r.Status.Phase, Gone: gone}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, s)
}

func (h *History) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	s := NodeState{RV: rv(n.ResourceVersion), Seen: time.Now(), Name: n.Name}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			s.Ready = c.Status
		case names.FencingCompleteCondition:
			s.FencingComplete = c.Status == corev1.ConditionTrue
		case names.LyingFenceCondition:
			s.LyingFence = c.Status == corev1.ConditionTrue
		}
	}
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case names.OutOfServiceTaint:
			v := t.Value
			s.OutOfService = &v
		case names.QuarantineTaint:
			s.Quarantined = true
		case names.ForceEvictionTaint:
			s.ForceEvicted = true
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes = append(h.nodes, s)
}

func (h *History) podDeleted(obj any) {
	d := PodDeletion{Seen: time.Now()}
	pod, ok := obj.(*corev1.Pod)
	if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		if pod, ok = tomb.Obj.(*corev1.Pod); ok {
			d.LastRV = rv(pod.ResourceVersion)
		}
	} else if ok {
		d.RV = rv(pod.ResourceVersion)
	}
	if !ok {
		return
	}
	d.Namespace, d.Name, d.Node = pod.Namespace, pod.Name, pod.Spec.NodeName
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			d.Disruption = c.Reason
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deletions = append(h.deletions, d)
}

// Snapshot returns what was recorded so far.
func (h *History) Snapshot() (nodes []NodeState, deletions []PodDeletion) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]NodeState(nil), h.nodes...), append([]PodDeletion(nil), h.deletions...)
}

// Requests returns the FencingRequest states recorded so far.
func (h *History) Requests() []RequestState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]RequestState(nil), h.requests...)
}

func rv(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}
