package app

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestTrimForCache(t *testing.T) {
	fields := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	meta := metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "9", Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"l": "v"}}
	node := &v1.Node{
		ObjectMeta: *meta.DeepCopy(),
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: v1.TaintNodeOutOfService, Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{
			Conditions:      []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionFalse}},
			NodeInfo:        v1.NodeSystemInfo{BootID: "b1"},
			VolumesAttached: []v1.AttachedVolume{{Name: "kubernetes.io/csi/d^v1"}},
		},
	}
	in := node.DeepCopy()
	in.ManagedFields = fields
	in.Status.Images = []v1.ContainerImage{{Names: []string{"registry.example/db:1"}, SizeBytes: 1 << 20}}
	got, err := trimForCache(in)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, node) {
		t.Fatalf("a node keeps all but its managed fields and images:\ngot  %#v\nwant %#v", got, node)
	}

	va := &storagev1.VolumeAttachment{ObjectMeta: *meta.DeepCopy(), Spec: storagev1.VolumeAttachmentSpec{
		Attacher: "d", NodeName: "n1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv1")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"k": "v"}}}
	inVA := va.DeepCopy()
	inVA.ManagedFields = fields
	if got, err := trimForCache(inVA); err != nil || !equality.Semantic.DeepEqual(got, va) {
		t.Fatalf("a VolumeAttachment loses only its managed fields: %#v, %v", got, err)
	}
	if got, err := trimForCache("other"); err != nil || got != "other" {
		t.Fatalf("other values pass through: %v, %v", got, err)
	}
}
