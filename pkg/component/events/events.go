// Package events creates the Event recorder of a Fenceline component, the
// same way in both binaries.
package events

import (
	"context"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
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
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
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
