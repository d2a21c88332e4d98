// Package testobj builds the Nodes, Pods and storage objects that every
// component's tests need (the one builder dialect of the repository), with
// readable options:
//
//	node := testobj.Node("n1", testobj.NotReadySince(t0), testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
//	pod := testobj.Pod("default", "web-0", testobj.OnNode("n1"), testobj.Terminating(t0))
package testobj

import (
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/names"
)

// Epoch is the fixed instant the decision tests build their timestamps
// from, so that their cases read as offsets ("Epoch plus a minute").
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// NodeOption changes a Node under construction.
type NodeOption func(*v1.Node)

// Node returns a Node with a Ready=True condition unless options change it.
func Node(name string, opts ...NodeOption) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
			NodeInfo:   v1.NodeSystemInfo{BootID: "boot-1"},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// ReadySince sets Ready=True since t.
func ReadySince(t time.Time) NodeOption { return readyCond(v1.ConditionTrue, t) }

// NotReadySince sets Ready=False since t.
func NotReadySince(t time.Time) NodeOption { return readyCond(v1.ConditionFalse, t) }

// UnknownSince sets Ready=Unknown since t (node controller: kubelet silent).
func UnknownSince(t time.Time) NodeOption { return readyCond(v1.ConditionUnknown, t) }

func readyCond(s v1.ConditionStatus, t time.Time) NodeOption {
	return func(n *v1.Node) {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: s, Reason: "Test", LastTransitionTime: metav1.NewTime(t), LastHeartbeatTime: metav1.NewTime(t)}}
	}
}

// NoReadyCondition removes the Ready condition, as on a node whose kubelet
// never reported.
func NoReadyCondition() NodeOption {
	return func(n *v1.Node) {
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady })
	}
}

// Condition sets a node condition of the given type (e.g. FencingComplete),
// replacing one of the same type.
func Condition(condType string, s v1.ConditionStatus) NodeOption {
	return func(n *v1.Node) {
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return string(c.Type) == condType })
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeConditionType(condType), Status: s})
	}
}

// ConditionSince sets a node condition of the given type with status s and
// lastTransitionTime t, replacing one of the same type (e.g. a
// node-problem-detector condition that a fencing rule watches).
func ConditionSince(condType string, s v1.ConditionStatus, t time.Time) NodeOption {
	return func(n *v1.Node) {
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return string(c.Type) == condType })
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeConditionType(condType), Status: s, LastTransitionTime: metav1.NewTime(t)})
	}
}

// Label sets a label.
func Label(k, v string) NodeOption {
	return func(n *v1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[k] = v
	}
}

// Taint adds a taint.
func Taint(key string, effect v1.TaintEffect) NodeOption {
	return func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect}) }
}

// TaintAt adds a taint with timeAdded t, as the API server and kubectl set
// it for NoExecute taints.
func TaintAt(key string, effect v1.TaintEffect, t time.Time) NodeOption {
	return func(n *v1.Node) {
		at := metav1.NewTime(t)
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: effect, TimeAdded: &at})
	}
}

// BootID sets status.nodeInfo.bootID.
func BootID(id string) NodeOption { return func(n *v1.Node) { n.Status.NodeInfo.BootID = id } }

// Annotation sets an annotation.
func Annotation(k, v string) NodeOption {
	return func(n *v1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[k] = v
	}
}

// VolumesInUse sets status.volumesInUse.
func VolumesInUse(vols ...v1.UniqueVolumeName) NodeOption {
	return func(n *v1.Node) { n.Status.VolumesInUse = vols }
}

// VolumesAttached sets status.volumesAttached.
func VolumesAttached(vols ...v1.UniqueVolumeName) NodeOption {
	return func(n *v1.Node) {
		n.Status.VolumesAttached = nil
		for _, v := range vols {
			n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: v, DevicePath: ""})
		}
	}
}

// PodOption changes a Pod under construction.
type PodOption func(*v1.Pod)

// Pod returns a running pod with one container.
func Pod(namespace, name string, opts ...PodOption) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.example/app:1"}}},
		Status:     v1.PodStatus{Phase: v1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// OnNode binds the pod to a node.
func OnNode(node string) PodOption { return func(p *v1.Pod) { p.Spec.NodeName = node } }

// Terminating sets a deletion timestamp t with a 30 s grace period.
func Terminating(t time.Time) PodOption {
	return func(p *v1.Pod) {
		ts := metav1.NewTime(t.Add(30 * time.Second))
		grace := int64(30)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
	}
}

// ForceDeleted sets a deletion timestamp with grace period 0 and a
// finalizer, as left behind by a force deletion of a pod with finalizers.
func ForceDeleted(t time.Time) PodOption {
	return func(p *v1.Pod) {
		ts := metav1.NewTime(t)
		grace := int64(0)
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
		p.Finalizers = append(p.Finalizers, "example.com/hold")
	}
}

// Tolerate adds a toleration for the key (operator Exists, any effect).
func Tolerate(key string) PodOption {
	return func(p *v1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: key, Operator: v1.TolerationOpExists})
	}
}

// Toleration adds a toleration as given (an Equal operator with key, value
// and effect, or any other form), for tests of toleration matching.
func Toleration(t v1.Toleration) PodOption {
	return func(p *v1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, t) }
}

// CreatedAt sets the pod's creation time.
func CreatedAt(t time.Time) PodOption {
	return func(p *v1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

// ScheduledAt sets the pod's PodScheduled condition True since t.
func ScheduledAt(t time.Time) PodOption {
	return func(p *v1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t)})
	}
}

// PodAnnotation sets an annotation on the pod.
func PodAnnotation(k, v string) PodOption {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

// PodCondition sets a pod condition of the type to the status.
func PodCondition(typ string, s v1.ConditionStatus) PodOption {
	return func(p *v1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodConditionType(typ), Status: s})
	}
}

// Mirror makes the pod a static pod's mirror.
func Mirror() PodOption {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[v1.MirrorPodAnnotationKey] = "mirror"
	}
}

// OwnedBy adds a controller owner reference of the given kind.
func OwnedBy(kind, name string) PodOption {
	return func(p *v1.Pod) {
		yes := true
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &yes})
	}
}

// Claim adds a volume backed by the PVC.
func Claim(volume, claim string) PodOption {
	return WithVolume(v1.Volume{Name: volume, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
}

// EmptyDir adds an emptyDir volume.
func EmptyDir(volume string) PodOption {
	return WithVolume(v1.Volume{Name: volume, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
}

// HostPath adds a hostPath volume.
func HostPath(volume, path string) PodOption {
	return WithVolume(v1.Volume{Name: volume, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}})
}

// InlineCSI adds a CSI ephemeral inline volume.
func InlineCSI(volume, driver string) PodOption {
	return WithVolume(v1.Volume{Name: volume, VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driver}}})
}

// WithVolume adds any volume.
func WithVolume(vol v1.Volume) PodOption {
	return func(p *v1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, vol) }
}

// PVC returns a claim bound to the PV.
func PVC(namespace, name, pv string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resourceGi}},
			VolumeName:  pv,
		},
	}
}

// CSIPV returns a CSI PersistentVolume of the driver with the access mode.
func CSIPV(name, driver, handle string, mode v1.PersistentVolumeAccessMode) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:                   []v1.PersistentVolumeAccessMode{mode},
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resourceGi},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
		},
	}
}

// CSIDriver returns a CSIDriver with the annotations (e.g. the safe-detach
// opt-in).
func CSIDriver(name string, annotations map[string]string) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

// VAOption changes a VolumeAttachment under construction.
type VAOption func(*storagev1.VolumeAttachment)

// VA returns a VolumeAttachment of the PV to the node by the attacher.
func VA(name, attacher, pv, node string, opts ...VAOption) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.VolumeAttachmentSpec{
			Attacher: attacher,
			NodeName: node,
			Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv},
		},
	}
	for _, o := range opts {
		o(va)
	}
	return va
}

// VAAnnotation sets an annotation on the VolumeAttachment (a fence intent
// or record, the node ID it was attached with).
func VAAnnotation(k, v string) VAOption {
	return func(va *storagev1.VolumeAttachment) {
		if va.Annotations == nil {
			va.Annotations = map[string]string{}
		}
		va.Annotations[k] = v
	}
}

// Lease returns the node's Lease in kube-node-lease, last renewed at renew,
// without leaseDurationSeconds unless an option (LeaseDuration) sets it.
func Lease(node string, renew time.Time, opts ...HeartbeatOption) *coordinationv1.Lease {
	at := metav1.NewMicroTime(renew)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: v1.NamespaceNodeLease, Name: node},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node, RenewTime: &at},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// HeartbeatOption changes a Lease under construction (a heartbeat or a
// node's Lease).
type HeartbeatOption func(*coordinationv1.Lease)

// HeartbeatDuration is the leaseDurationSeconds of Heartbeat unless an
// option changes it: long, so that a fresh heartbeat cannot go stale while
// a slow test runs.
const HeartbeatDuration = time.Hour

// Heartbeat returns the heartbeat Lease that a fenceline-attacher of the
// driver, whose driver advertises UNPUBLISH_FENCE, renews in its namespace
// (as pkg/attacher/heartbeat writes it), last renewed at renew.
func Heartbeat(namespace, driver string, renew time.Time, opts ...HeartbeatOption) *coordinationv1.Lease {
	at := metav1.NewMicroTime(renew)
	holder := "attacher-0"
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      names.AttacherHeartbeatLeaseName(driver),
			Labels:    map[string]string{names.DriverLabel: names.SanitizeDriverName(driver)},
			Annotations: map[string]string{
				names.HeartbeatDriverAnnotation:         driver,
				names.HeartbeatUnpublishFenceAnnotation: "true",
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &at, LeaseDurationSeconds: ptr.To(int32(HeartbeatDuration / time.Second))},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// LeaseDuration sets the heartbeat's leaseDurationSeconds.
func LeaseDuration(d time.Duration) HeartbeatOption {
	return func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second)) }
}

// NoUnpublishFence makes the heartbeat report that the driver does not
// advertise UNPUBLISH_FENCE.
func NoUnpublishFence() HeartbeatOption {
	return func(l *coordinationv1.Lease) { l.Annotations[names.HeartbeatUnpublishFenceAnnotation] = "false" }
}

// AttachRequired sets the CSIDriver's spec.attachRequired.
func AttachRequired(d *storagev1.CSIDriver, required bool) *storagev1.CSIDriver {
	d.Spec.AttachRequired = &required
	return d
}

var resourceGi = *resource.NewQuantity(1<<30, resource.BinarySI)

// CSINode returns the node's CSINode with one entry: the driver and the
// node ID it registered.
func CSINode(node, driver, nodeID string) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: nodeID}}},
	}
}

// Address adds a node address of type t.
func Address(t v1.NodeAddressType, addr string) NodeOption {
	return func(n *v1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: t, Address: addr})
	}
}
