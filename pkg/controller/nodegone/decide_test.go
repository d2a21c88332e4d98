package nodegone

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
)

func TestDecide(t *testing.T) {
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-1"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: "mock.fenceline.io", NodeName: "node-a"}}
	deleting := va.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	node := testobj.Node("node-a")
	pod := testobj.Pod("app", "db-0", testobj.OnNode("node-a"))
	tests := []struct {
		name       string
		in         Input
		detach     bool
		warn       bool
		whyContain string
	}{
		{name: "VolumeAttachment gone", in: Input{AttacherFences: true}, whyContain: "gone"},
		{name: "already being detached", in: Input{VA: deleting, AttacherFences: true}, whyContain: "already being detached"},
		{name: "node exists", in: Input{VA: va, Node: node, AttacherFences: true}, whyContain: "exists"},
		{name: "node exists, even with no pods and no attacher", in: Input{VA: va, Node: node}, whyContain: "exists"},
		{name: "node gone, a pod still bound to it", in: Input{VA: va, Pods: []*v1.Pod{pod}, AttacherFences: true}, whyContain: "still bound"},
		{name: "node gone, a pod bound, no attacher: the pod first", in: Input{VA: va, Pods: []*v1.Pod{pod}}, whyContain: "still bound"},
		{name: "node gone, no pod, no fence-capable attacher", in: Input{VA: va, Missing: "driver does not advertise UNPUBLISH_FENCE"}, warn: true, whyContain: "UNPUBLISH_FENCE"},
		{name: "node gone, no pod, no attacher heartbeat", in: Input{VA: va}, warn: true, whyContain: "no heartbeat"},
		{name: "node gone, no pod, fence-capable attacher", in: Input{VA: va, AttacherFences: true}, detach: true, whyContain: "fence=true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.in)
			if d.Detach != tc.detach || d.Warn != tc.warn || !strings.Contains(d.Why, tc.whyContain) {
				t.Errorf("Decide = %+v, want detach %t, warn %t, why containing %q", d, tc.detach, tc.warn, tc.whyContain)
			}
		})
	}
}
