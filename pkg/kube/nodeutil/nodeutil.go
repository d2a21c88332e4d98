// Package nodeutil holds pure helpers about Nodes and the informer indexes
// that let Fenceline's components find the pods and VolumeAttachments of one
// node without listing the whole cluster. It is a leaf that every component
// may import.
package nodeutil

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

const (
	// PodsByNodeIndex indexes pods by spec.nodeName.
	PodsByNodeIndex = "spec.nodeName"
	// VAsByNodeIndex indexes VolumeAttachments by spec.nodeName.
	VAsByNodeIndex = "spec.nodeName"
)

// IsReady reports whether the node's Ready condition is True. A node without
// a Ready condition is not ready, as in kube-controller-manager.
func IsReady(node *v1.Node) bool {
	c := ReadyCondition(node)
	return c != nil && c.Status == v1.ConditionTrue
}

// ReadyCondition returns the node's Ready condition, or nil.
func ReadyCondition(node *v1.Node) *v1.NodeCondition {
	return Condition(node, string(v1.NodeReady))
}

// Condition returns the node's condition of type typ, or nil.
func Condition(node *v1.Node, typ string) *v1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if string(node.Status.Conditions[i].Type) == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// NotReadyFor returns how long the node's Ready condition has not been True,
// measured from the condition's lastTransitionTime. It returns false when the
// node is Ready. A node that has no Ready condition at all (never reported)
// counts as not ready since its creation.
func NotReadyFor(node *v1.Node, now time.Time) (time.Duration, bool) {
	if node == nil || IsReady(node) {
		return 0, false
	}
	d := now.Sub(NotReadySince(node))
	if d < 0 {
		d = 0
	}
	return d, true
}

// NotReadySince returns when the node's Ready condition last changed: the
// condition's lastTransitionTime, or the node's creation for a node that has
// never reported one. For a node that is not Ready, it is when the node went
// (or, never having reported, has been) not ready.
func NotReadySince(node *v1.Node) time.Time {
	if c := ReadyCondition(node); c != nil && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	return node.CreationTimestamp.Time
}

// Lookup returns the node from the informer cache, or nil and no error when
// the node no longer exists. A sync keyed by node name runs after the node's
// delete event too, and a deleted node has nothing left for it to act on.
func Lookup(nodes corelisters.NodeLister, name string) (*v1.Node, error) {
	node, err := nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting node %q from the cache: %w", name, err)
	}
	return node, nil
}

// FindTaint returns the first taint on the node with the given key (any value,
// any effect), or nil.
func FindTaint(node *v1.Node, key string) *v1.Taint {
	if node == nil {
		return nil
	}
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == key {
			return &node.Spec.Taints[i]
		}
	}
	return nil
}

// HasTaint reports whether the node carries a taint with the given key.
func HasTaint(node *v1.Node, key string) bool {
	return FindTaint(node, key) != nil
}

// CSIUniqueVolumeName returns the name under which kubelet and the
// attach/detach controller list a CSI volume in node.status.volumesInUse and
// node.status.volumesAttached.
func CSIUniqueVolumeName(driver, volumeHandle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(csiUniquePrefix + driver + "^" + volumeHandle)
}

// CSIVolumeDriver returns the CSI driver of a name made by
// CSIUniqueVolumeName, and false for any other volume name.
func CSIVolumeDriver(name v1.UniqueVolumeName) (string, bool) {
	rest, ok := strings.CutPrefix(string(name), csiUniquePrefix)
	if !ok {
		return "", false
	}
	driver, _, ok := strings.Cut(rest, "^")
	return driver, ok
}

const csiUniquePrefix = "kubernetes.io/csi/"

// CSIVolumeOf returns the driver and volume handle of a name made by
// CSIUniqueVolumeName, and false for any other volume name.
func CSIVolumeOf(name v1.UniqueVolumeName) (driver, handle string, ok bool) {
	rest, ok := strings.CutPrefix(string(name), csiUniquePrefix)
	if !ok {
		return "", "", false
	}
	driver, handle, ok = strings.Cut(rest, "^")
	return driver, handle, ok && driver != "" && handle != ""
}

// CSIAttachmentName is the name the attach/detach controller gives the
// VolumeAttachment of a CSI volume on a node (kubelet's CSI plugin names it
// the same way), so that it can be read or written by name, fresh, without
// listing.
func CSIAttachmentName(driver, handle, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// PodNodeNameIndexFunc indexes a pod by the node it is bound to.
func PodNodeNameIndexFunc(obj interface{}) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// VANodeNameIndexFunc indexes a VolumeAttachment by its node.
func VANodeNameIndexFunc(obj interface{}) ([]string, error) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{va.Spec.NodeName}, nil
}

// AddPodIndexer adds PodsByNodeIndex to a pod informer unless it is there.
func AddPodIndexer(inf cache.SharedIndexInformer) error {
	return addIndexer(inf, PodsByNodeIndex, PodNodeNameIndexFunc, "pod")
}

// AddVAIndexer adds VAsByNodeIndex to a VolumeAttachment informer unless it
// is there.
func AddVAIndexer(inf cache.SharedIndexInformer) error {
	return addIndexer(inf, VAsByNodeIndex, VANodeNameIndexFunc, "VolumeAttachment")
}

func addIndexer(inf cache.SharedIndexInformer, name string, fn cache.IndexFunc, what string) error {
	if _, ok := inf.GetIndexer().GetIndexers()[name]; ok {
		return nil
	}
	if err := inf.AddIndexers(cache.Indexers{name: fn}); err != nil {
		return fmt.Errorf("adding %s index %q: %w", what, name, err)
	}
	return nil
}

// NodeIndexedInformers returns the factory's pod and VolumeAttachment
// informers with PodsByNodeIndex and VAsByNodeIndex added, for a controller
// that looks up both by node. Call it before the factory is started.
func NodeIndexedInformers(f informers.SharedInformerFactory) (pods, vas cache.SharedIndexInformer, err error) {
	pods = f.Core().V1().Pods().Informer()
	vas = f.Storage().V1().VolumeAttachments().Informer()
	if err := AddPodIndexer(pods); err != nil {
		return nil, nil, err
	}
	if err := AddVAIndexer(vas); err != nil {
		return nil, nil, err
	}
	return pods, vas, nil
}

// PodsOnNode returns the cached pods bound to the node.
func PodsOnNode(indexer cache.Indexer, nodeName string) ([]*v1.Pod, error) {
	return onNode[*v1.Pod](indexer, PodsByNodeIndex, nodeName, "pods")
}

// VAsOnNode returns the cached VolumeAttachments of the node.
func VAsOnNode(indexer cache.Indexer, nodeName string) ([]*storagev1.VolumeAttachment, error) {
	return onNode[*storagev1.VolumeAttachment](indexer, VAsByNodeIndex, nodeName, "VolumeAttachments")
}

func onNode[T any](indexer cache.Indexer, index, nodeName, what string) ([]T, error) {
	objs, err := indexer.ByIndex(index, nodeName)
	if err != nil {
		return nil, fmt.Errorf("looking up %s on node %q: %w", what, nodeName, err)
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out, nil
}

// HasTaintEffect reports whether the node carries a taint with the given key
// and effect.
func HasTaintEffect(node *v1.Node, key string, effect v1.TaintEffect) bool {
	return node != nil && effect != "" && slices.ContainsFunc(node.Spec.Taints, func(t v1.Taint) bool { return TaintMatches(t, key, effect) })
}

// TaintMatches reports whether t has the key and the effect; an empty effect
// matches any (the out-of-service taint counts with any effect).
func TaintMatches(t v1.Taint, key string, effect v1.TaintEffect) bool {
	return t.Key == key && (effect == "" || t.Effect == effect)
}
