package events

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// forbiddenSink answers every write Forbidden, as the API server does to a
// component whose RBAC lacks the Events rule.
type forbiddenSink struct{ calls int }

func (f *forbiddenSink) err() error {
	f.calls++
	return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "x", errors.New("no rule"))
}
func (f *forbiddenSink) Create(*v1.Event) (*v1.Event, error)        { return nil, f.err() }
func (f *forbiddenSink) Update(*v1.Event) (*v1.Event, error)        { return nil, f.err() }
func (f *forbiddenSink) Patch(*v1.Event, []byte) (*v1.Event, error) { return nil, f.err() }

// Without the Events rule the component says so once per namespace and
// the broadcaster sees no error (it would log one per Event); another
// error is passed on.
func TestForbiddenEventsLoggedOnce(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	inner := &forbiddenSink{}
	s := &forbiddenOnce{EventSink: inner, logger: logger, component: "fenceline-test"}
	for _, ns := range []string{"a", "a", "b", "a"} {
		e := &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e"}}
		out, err := s.Create(e)
		if err != nil || out != e {
			t.Fatalf("Create in %s = %v, %v; want the Event back and no error", ns, out, err)
		}
	}
	if _, err := s.Patch(&v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "b"}}, nil); err != nil {
		t.Fatalf("Patch = %v, want no error", err)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(logs, "Events are not recorded"); n != 2 || inner.calls != 5 {
		t.Errorf("%d log lines for 2 namespaces (want 2), %d writes tried (want 5):\n%s", n, inner.calls, logs)
	}
	other := &forbiddenOnce{EventSink: errSink{}, logger: logger}
	if _, err := other.Create(&v1.Event{}); err == nil {
		t.Error("an error other than Forbidden was swallowed")
	}
}

type errSink struct{}

func (errSink) Create(*v1.Event) (*v1.Event, error) { return nil, errors.New("conflict") }
func (errSink) Update(*v1.Event) (*v1.Event, error) { return nil, errors.New("conflict") }
func (errSink) Patch(*v1.Event, []byte) (*v1.Event, error) {
	return nil, errors.New("conflict")
}
