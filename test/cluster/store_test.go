package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// TestWatchStore checks that the store watch hands over the object stored
// before it started, then every later version and the deletion, each at
// the resourceVersion the API server answered with, in order.
func TestWatchStore(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := c.Client().CoreV1().Nodes()
	n, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "store-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node: %v", err)
	}
	want := []string{fmt.Sprintf("%s put v=", n.ResourceVersion)}

	events := make(chan StoreEvent, 16)
	w, err := c.WatchStore(ctx, "minions", serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer(), func(ev StoreEvent) { events <- ev })
	if err != nil {
		t.Fatalf("WatchStore: %v", err)
	}
	for _, v := range []string{"1", "2", "3"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"v":%q}}}`, v)
		n, err = nodes.Patch(ctx, "store-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("patching node: %v", err)
		}
		want = append(want, fmt.Sprintf("%s put v=%s", n.ResourceVersion, v))
	}
	if err := nodes.Delete(ctx, "store-a", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node: %v", err)
	}

	var got []string
	for len(got) < len(want)+1 {
		select {
		case ev := <-events:
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				t.Fatalf("decoded a %T, want a Node", ev.Object)
			}
			what := "put"
			if ev.Deleted {
				what = "delete"
			}
			got = append(got, fmt.Sprintf("%d %s v=%s", ev.Revision, what, node.Labels["v"]))
		case <-ctx.Done():
			t.Fatalf("the watch delivered %q, want %q and the deletion (err %v)", got, want, w.Err())
		}
	}
	if !slices.Equal(got[:len(want)], want) {
		t.Errorf("versions %q, want %q", got[:len(want)], want)
	}
	if last := got[len(want)]; !strings.HasSuffix(last, " delete v=3") {
		t.Errorf("last event %q, want the deletion of the last version", last)
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}
