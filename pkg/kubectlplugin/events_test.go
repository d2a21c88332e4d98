package kubectlplugin

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An Event's count and first time, whichever API wrote it.
func TestEventStatusCountAndFirst(t *testing.T) {
	created := metav1.NewTime(t0)
	for _, tc := range []struct {
		name      string
		event     v1.Event
		wantCount int32
		wantFirst time.Time
	}{
		{"core/v1, repeated", v1.Event{Count: 3, FirstTimestamp: metav1.NewTime(t0.Add(time.Second))}, 3, t0.Add(time.Second)},
		{"events.k8s.io, a series", v1.Event{EventTime: metav1.NewMicroTime(t0.Add(2 * time.Second)), Series: &v1.EventSeries{Count: 4}}, 4, t0.Add(2 * time.Second)},
		{"neither", v1.Event{}, 1, t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.event.CreationTimestamp = created
			es := eventStatus(tc.event)
			if es.Count != tc.wantCount || es.First == nil || !es.First.Equal(&metav1.Time{Time: tc.wantFirst}) {
				t.Errorf("count %d, first %v; want %d, %v", es.Count, es.First, tc.wantCount, tc.wantFirst)
			}
		})
	}
}
