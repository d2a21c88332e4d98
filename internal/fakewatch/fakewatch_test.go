package fakewatch

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestWaitThenDelete: once Wait returns, a deletion right away reaches the
// informer's cache. Without the wait this is the race the package exists
// for; with it the deletion must always arrive.
func TestWaitThenDelete(t *testing.T) {
	for range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		client := fake.NewClientset(node)
		watches := Track(client)
		factory := informers.NewSharedInformerFactory(client, 0)
		nodes := factory.Core().V1().Nodes().Informer()
		factory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
			t.Fatal("cache never synced")
		}
		if err := watches.Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
			return len(nodes.GetStore().List()) == 0, nil
		}); err != nil {
			t.Fatal("the deletion never reached the cache")
		}
		cancel()
		factory.Shutdown()
	}
}

// TestWaitTimesOut: Wait for more watches than start ends with ctx and
// says how many started.
func TestWaitTimesOut(t *testing.T) {
	w := Track(fake.NewClientset())
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := w.Wait(ctx, 1)
	if err == nil || err.Error() != "0 of 1 informer watches started: context deadline exceeded" {
		t.Fatalf("Wait = %v, want 0 of 1 and the deadline", err)
	}
}
