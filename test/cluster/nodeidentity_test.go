package cluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestNodeKubeconfig: a node's kubeconfig authenticates as that node, and
// the API server holds it to what a node may do (the Node authorizer and
// NodeRestriction), as it holds a real cluster's kubelets: it registers
// and updates its own Node, but may not touch another node, read a pod
// not bound to it, or change its own taints.
func TestNodeKubeconfig(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, err := c.NodeKubeconfig("node-x")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	node := kubernetes.NewForConfigOrDie(cfg)
	admin := c.Client()
	for _, name := range []string{"node-x", "node-y"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       corev1.PodSpec{NodeName: "node-y", Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	label := []byte(`{"metadata":{"labels":{"seen":"yes"}}}`)
	if _, err := node.CoreV1().Nodes().Patch(ctx, "node-x", types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatalf("node-x labelling its own Node: %v", err)
	}
	for what, call := range map[string]func() error{
		"labelling node-y": func() error {
			_, err := node.CoreV1().Nodes().Patch(ctx, "node-y", types.MergePatchType, label, metav1.PatchOptions{})
			return err
		},
		"reading a pod bound to node-y": func() error {
			_, err := node.CoreV1().Pods("default").Get(ctx, "elsewhere", metav1.GetOptions{})
			return err
		},
		"tainting itself": func() error {
			_, err := node.CoreV1().Nodes().Patch(ctx, "node-x", types.MergePatchType, []byte(`{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`), metav1.PatchOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("node-x %s: err %v, want Forbidden", what, err)
		}
	}
}
