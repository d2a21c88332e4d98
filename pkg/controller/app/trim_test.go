package app

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestTrimForCache(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "db-0", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels: map[string]string{"app": "db"}, Annotations: map[string]string{"kubernetes.io/config.mirror": "x"},
		OwnerReferences:   []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: ptr.To(true)}},
		DeletionTimestamp: ptr.To(metav1.Now()), Finalizers: []string{"f"},
	}
	spec := v1.PodSpec{
		NodeName:    "n1",
		Tolerations: []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](2)}},
		Volumes:     []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}},
	}
	status := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "db", Ready: true}}}
	full := spec.DeepCopy()
	full.Containers = []v1.Container{{Name: "db", Image: "db:1", Env: []v1.EnvVar{{Name: "A", Value: "b"}}}}
	full.InitContainers = []v1.Container{{Name: "init", Image: "init:1"}}
	full.Priority = ptr.To[int32](1000)
	full.Affinity = &v1.Affinity{}
	full.TerminationGracePeriodSeconds = ptr.To[int64](30)
	withFields := meta.DeepCopy()
	withFields.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}

	got, err := trimForCache(&v1.Pod{ObjectMeta: *withFields, Spec: *full, Status: *status.DeepCopy()})
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Pod{ObjectMeta: meta, Spec: spec, Status: status}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("trimmed pod:\n%#v\nwant (metadata without managed fields, status whole, spec: node, tolerations, volumes):\n%#v", got, want)
	}

	node := &v1.Node{ObjectMeta: *withFields.DeepCopy(), Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{Images: []v1.ContainerImage{{Names: []string{"img"}}}}}
	got, err = trimForCache(node.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	wantNode := node.DeepCopy()
	wantNode.ManagedFields = nil
	if !equality.Semantic.DeepEqual(got, wantNode) {
		t.Fatalf("a node loses only its managed fields: got %#v", got)
	}
	if got, err := trimForCache("not an object"); err != nil || got != "not an object" {
		t.Fatalf("other values pass through: %v, %v", got, err)
	}
}
