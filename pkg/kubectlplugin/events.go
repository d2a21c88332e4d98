package kubectlplugin

import (
	"cmp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EventStatus is an Event of one of Fenceline's components.
type EventStatus struct {
	Last      metav1.Time `json:"last"`
	Type      string      `json:"type"`
	Reason    string      `json:"reason"`
	Object    string      `json:"object"`
	Component string      `json:"component"`
	Message   string      `json:"message"`
	// Namespace is the object's, which Object does not name.
	Namespace string `json:"namespace,omitempty"`
	// Count is how many times it happened, since First.
	Count int32        `json:"count"`
	First *metav1.Time `json:"first,omitempty"`
}

func eventStatus(e v1.Event) EventStatus {
	es := EventStatus{Last: eventTime(e), Type: e.Type, Reason: e.Reason, Component: eventComponent(e), Message: e.Message,
		Object: strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name, Namespace: e.InvolvedObject.Namespace, Count: 1}
	// An Event written through events.k8s.io counts its repeats in its
	// series, one written through core/v1 in count; an Event with
	// neither happened once.
	switch {
	case e.Series != nil:
		es.Count = max(e.Series.Count, 1)
	case e.Count > 0:
		es.Count = e.Count
	}
	if first := eventFirst(e); !first.IsZero() {
		es.First = &first
	}
	return es
}

// fencelineEvents keeps the Events of Fenceline's components, oldest first.
func fencelineEvents(all []v1.Event) []v1.Event {
	var out []v1.Event
	for _, e := range all {
		if strings.HasPrefix(eventComponent(e), "fenceline-") {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b v1.Event) int {
		return cmp.Or(eventTime(a).Compare(eventTime(b).Time), strings.Compare(a.Name, b.Name))
	})
	return out
}

func eventComponent(e v1.Event) string {
	return cmp.Or(e.Source.Component, e.ReportingController)
}

// eventTime is when the Event last happened: lastTimestamp, else eventTime,
// else its creation.
func eventTime(e v1.Event) metav1.Time { return eventTimeOr(e.LastTimestamp, e) }

// eventFirst is when the Event first happened: firstTimestamp, else
// eventTime, else its creation.
func eventFirst(e v1.Event) metav1.Time { return eventTimeOr(e.FirstTimestamp, e) }

// eventTimeOr is t, else the times every Event has.
func eventTimeOr(t metav1.Time, e v1.Event) metav1.Time {
	switch {
	case !t.IsZero():
		return t
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}
