package podutil

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func deleting(at time.Time, grace int64) *v1.Pod {
	ts := metav1.NewTime(at)
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &ts, DeletionGracePeriodSeconds: &grace}}
}

func TestStates(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name                     string
		pod                      *v1.Pod
		terminating, forceDelete bool
		requested                time.Time
	}{
		{"running", &v1.Pod{}, false, false, time.Time{}},
		{"graceful deletion", deleting(t0.Add(30*time.Second), 30), true, false, t0},
		{"force deletion held by finalizer", deleting(t0, 0), true, true, t0},
		{"nil", nil, false, false, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTerminating(tc.pod); got != tc.terminating {
				t.Errorf("IsTerminating = %v", got)
			}
			if got := IsForceDeleted(tc.pod); got != tc.forceDelete {
				t.Errorf("IsForceDeleted = %v", got)
			}
			if got, _ := DeletionRequestedAt(tc.pod); !got.Equal(tc.requested) {
				t.Errorf("DeletionRequestedAt = %v, want %v", got, tc.requested)
			}
		})
	}
}

func TestTerminatingChanged(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	running := &v1.Pod{}
	tests := []struct {
		name     string
		old, cur *v1.Pod
		want     bool
	}{
		{"still running", running, &v1.Pod{}, false},
		{"deletion requested", running, deleting(t0, 30), true},
		{"still terminating", deleting(t0, 30), deleting(t0, 0), false},
		{"recreated under the same key", deleting(t0, 30), running, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := TerminatingChanged(tc.old, tc.cur); got != tc.want {
				t.Errorf("TerminatingChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestToleratesTaint(t *testing.T) {
	taint := &v1.Taint{Key: "k", Value: "v", Effect: v1.TaintEffectNoExecute}
	tests := []struct {
		name string
		tol  []v1.Toleration
		want bool
	}{
		{"none", nil, false},
		{"exists on key", []v1.Toleration{{Key: "k", Operator: v1.TolerationOpExists}}, true},
		{"equal value", []v1.Toleration{{Key: "k", Operator: v1.TolerationOpEqual, Value: "v"}}, true},
		{"wrong value", []v1.Toleration{{Key: "k", Operator: v1.TolerationOpEqual, Value: "w"}}, false},
		{"wrong effect", []v1.Toleration{{Key: "k", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}, false},
		{"tolerate everything", []v1.Toleration{{Operator: v1.TolerationOpExists}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1.Pod{Spec: v1.PodSpec{Tolerations: tc.tol}}
			if got := ToleratesTaint(p, taint); got != tc.want {
				t.Errorf("ToleratesTaint = %v, want %v", got, tc.want)
			}
		})
	}
}
