// Package events creates the Event recorder of a Fenceline component, the
// same way in both binaries.
package events

import (
	"context"
	"os"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// NewRecorder returns a recorder whose Events name component (and this
// host) as their source, written through client, and a function that
// flushes and stops it. client should have a rate limiter of its own, so
// that Events never delay the component's real work; the broadcaster drops
// Events under pressure rather than block a caller.
//
// The broadcaster is not stopped by ctx (only its logger comes from it):
// work still running at shutdown may record Events, and the caller stops
// the broadcaster once that work has returned.
func NewRecorder(ctx context.Context, client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&forbiddenOnce{
		EventSink: &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")},
		logger:    klog.FromContext(ctx), component: component,
	})
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: component, Host: Hostname(component)})
	return recorder, broadcaster.Shutdown
}

// Hostname is the host name, or fallback when it cannot be read.
func Hostname(fallback string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return fallback
	}
	return h
}

// forbiddenOnce is an Event sink that turns a Forbidden answer into one
// clear log line per namespace, at default verbosity, instead of an error
// per Event: a component installed with RBAC that does not grant Events
// (an attacher swapped in with upstream's rules) works on and says once
// what it cannot do. Any other error goes to the broadcaster as before.
type forbiddenOnce struct {
	record.EventSink
	logger    klog.Logger
	component string
	mu        sync.Mutex
	told      map[string]bool
}

func (s *forbiddenOnce) Create(e *v1.Event) (*v1.Event, error) {
	out, err := s.EventSink.Create(e)
	return s.check(e, out, err)
}

func (s *forbiddenOnce) Update(e *v1.Event) (*v1.Event, error) {
	out, err := s.EventSink.Update(e)
	return s.check(e, out, err)
}

func (s *forbiddenOnce) Patch(e *v1.Event, data []byte) (*v1.Event, error) {
	out, err := s.EventSink.Patch(e, data)
	return s.check(e, out, err)
}

// check passes out and err on, except a Forbidden error, which it logs
// once per namespace and swallows (the broadcaster would log every one).
// The Event itself stands for the answer: the broadcaster's correlator
// reads it.
func (s *forbiddenOnce) check(e, out *v1.Event, err error) (*v1.Event, error) {
	if !apierrors.IsForbidden(err) {
		return out, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.told[e.Namespace] {
		if s.told == nil {
			s.told = map[string]bool{}
		}
		s.told[e.Namespace] = true
		s.logger.Info("Events are not recorded: RBAC forbids writing them; grant create, patch and update on events to see them",
			"component", s.component, "namespace", e.Namespace, "err", err.Error())
	}
	return e, nil
}
