package kubeclient

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDropManagedFields(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	got, err := DropManagedFields(node)
	if err != nil {
		t.Fatal(err)
	}
	n := got.(*v1.Node)
	if n.ManagedFields != nil || n.Name != "n1" || n.Labels["a"] != "b" {
		t.Fatalf("got %+v, want the node without its managed fields only", n.ObjectMeta)
	}
	if got, err := DropManagedFields("not an object"); err != nil || got != "not an object" {
		t.Fatalf("other values pass through: %v, %v", got, err)
	}
}
