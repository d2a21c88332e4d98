package chaos

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
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
	// RV is the resourceVersion (etcd revision) of the deletion.
	RV              uint64
	Seen            time.Time
	Namespace, Name string
	Node            string
	// Disruption is the reason of the pod's DisruptionTarget condition
	// when it was deleted (e.g. DeletionByTaintManager), if any.
	Disruption string
	// KubeletStopped: the pod's last version was being deleted and had
	// every container reported terminated. Only the kubelet that runs a
	// pod writes its container states, so its node's kubelet confirmed
	// the stop, as it does before its own final deletion of a pod whose
	// graceful deletion it finished.
	KubeletStopped bool
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

// History records, straight from etcd, the node states, pod deletions
// and FencingRequest states of an episode: every version etcd stored,
// whatever happens to kube-apiserver meanwhile (an informer re-listing
// after a restart would see only each object's latest version, and a
// judge would compare a deletion with a node state from before the
// trigger it followed). A single etcd orders every write, so revisions
// order the records across kinds.
type History struct {
	watches []*cluster.StoreWatch

	mu        sync.Mutex
	nodes     []NodeState
	deletions []PodDeletion
	requests  []RequestState
}

// storeDecoder decodes what kube-apiserver stores: built-in kinds in
// protobuf, Fenceline's custom resources in JSON.
var storeDecoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(fencingv1alpha1.AddToScheme(s))
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// Record starts recording nodes and pods until ctx ends; it returns once
// the objects stored now are recorded.
func Record(ctx context.Context, c *cluster.Cluster) (*History, error) {
	h := &History{}
	if err := h.watch(ctx, c, "minions", func(ev cluster.StoreEvent) {
		if n, ok := ev.Object.(*corev1.Node); ok && !ev.Deleted {
			h.node(n, ev)
		}
	}); err != nil {
		return nil, err
	}
	if err := h.watch(ctx, c, "pods", func(ev cluster.StoreEvent) {
		if p, ok := ev.Object.(*corev1.Pod); ok && ev.Deleted {
			h.podDeleted(p, ev)
		}
	}); err != nil {
		return nil, err
	}
	return h, nil
}

// RecordFencing also records the FencingRequests' phases; for episodes
// with the fencing API installed.
func (h *History) RecordFencing(ctx context.Context, c *cluster.Cluster) error {
	return h.watch(ctx, c, fencingv1alpha1.GroupName+"/fencingrequests", func(ev cluster.StoreEvent) {
		if r, ok := ev.Object.(*fencingv1alpha1.FencingRequest); ok {
			h.request(r, ev)
		}
	})
}

func (h *History) watch(ctx context.Context, c *cluster.Cluster, resource string, fn func(cluster.StoreEvent)) error {
	w, err := c.WatchStore(ctx, resource, storeDecoder, fn)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watches = append(h.watches, w)
	return nil
}

// Err returns the first hole in the recorded history (an object etcd
// stored that could not be read), nil if none.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		if err := w.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (h *History) request(r *fencingv1alpha1.FencingRequest, ev cluster.StoreEvent) {
	s := RequestState{RV: ev.Revision, Seen: ev.Seen, Name: r.Name, Node: r.Spec.NodeName, Phase: r.Status.Phase, Gone: ev.Deleted}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, s)
}

func (h *History) node(n *corev1.Node, ev cluster.StoreEvent) {
	s := NodeState{RV: ev.Revision, Seen: ev.Seen, Name: n.Name}
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

func (h *History) podDeleted(pod *corev1.Pod, ev cluster.StoreEvent) {
	d := PodDeletion{RV: ev.Revision, Seen: ev.Seen, Namespace: pod.Namespace, Name: pod.Name, Node: pod.Spec.NodeName, KubeletStopped: kubeletStopped(pod)}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			d.Disruption = c.Reason
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deletions = append(h.deletions, d)
}

// kubeletStopped reports whether pod was being deleted with every one of
// its containers reported terminated (see PodDeletion.KubeletStopped).
func kubeletStopped(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Terminated == nil {
			return false
		}
	}
	return true
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
