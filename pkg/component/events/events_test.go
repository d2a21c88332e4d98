package events

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// TestRecorderOutlivesContext: an Event recorded after the component's
// context ended (a sync finishing during shutdown) is still written, with
// the component as its source.
func TestRecorderOutlivesContext(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	recorder, stop := NewRecorder(ctx, client, "fenceline-test")
	defer stop()
	cancel()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u"}}
	recorder.Event(pod, v1.EventTypeNormal, "Tested", "recorded after the context ended")
	var got []v1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = list.Items
		return len(got) > 0, nil
	})
	if err != nil {
		t.Fatalf("no Event written: %v", err)
	}
	if got[0].Reason != "Tested" || got[0].Source.Component != "fenceline-test" || got[0].Source.Host == "" {
		t.Errorf("Event %+v", got[0])
	}
}
