package app

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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

func TestRecordConfigBudget(t *testing.T) {
	tests := []struct {
		name      string
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"the shared default gets the floor", 5, 10, fenceRecordQPS, fenceRecordBurst},
		{"a larger budget is kept", 500, 1000, 500, 1000},
		{"each is raised on its own", 80, 20, 80, fenceRecordBurst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &rest.Config{Host: "https://example", QPS: tt.qps, Burst: tt.burst, UserAgent: userAgent}
			got := recordConfig(in)
			if got.QPS != tt.wantQPS || got.Burst != tt.wantBurst {
				t.Errorf("record client budget %v/%d, want %v/%d", got.QPS, got.Burst, tt.wantQPS, tt.wantBurst)
			}
			if in.QPS != tt.qps || in.Burst != tt.burst {
				t.Error("the attacher's own config was changed")
			}
			if got.Host != in.Host || got.UserAgent != userAgent {
				t.Error("the record client must reach the same API server as the same user agent")
			}
		})
	}
}
