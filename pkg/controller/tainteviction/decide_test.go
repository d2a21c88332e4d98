package tainteviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
)

func seconds(n int64) *int64 { return &n }

// toleration is one of upstream's test tolerations: key, value, effect
// NoExecute, operator Equal, and tolerationSeconds (nil: forever).
func toleration(key, value string, secs *int64) testobj.PodOption {
	return testobj.Toleration(v1.Toleration{Key: key, Operator: v1.TolerationOpEqual, Value: value, Effect: v1.TaintEffectNoExecute, TolerationSeconds: secs})
}

func taint(key, value string, effect v1.TaintEffect, added *time.Time) v1.Taint {
	t := v1.Taint{Key: key, Value: value, Effect: effect}
	if added != nil {
		ta := metav1.NewTime(*added)
		t.TimeAdded = &ta
	}
	return t
}

// TestEvictAt covers upstream's taint-eviction cases (an untolerated
// taint evicts at once, a finite toleration at its end, an infinite one
// never, a toleration of another key does not count, the minimum of
// several tolerations wins) and Fenceline's clock (timeAdded, the pod's
// arrival, the controller's first sighting).
func TestEvictAt(t *testing.T) {
	t0 := testobj.Epoch
	added := t0
	later := t0.Add(time.Minute)
	noExec := taint("testTaint1", "testTaint1", v1.TaintEffectNoExecute, &added)
	noExec2 := taint("testTaint2", "testTaint2", v1.TaintEffectNoExecute, &later)
	noSched := taint("testTaint1", "testTaint1", v1.TaintEffectNoSchedule, &added)
	early := testobj.ScheduledAt(t0.Add(-time.Hour))
	seenAt := func(v1.Taint) time.Time { return t0.Add(10 * time.Second) }

	tests := []struct {
		name   string
		pod    *v1.Pod
		taints []v1.Taint
		seen   func(v1.Taint) time.Time
		never  bool
		at     time.Time
	}{
		{"no taints: never", testobj.Pod("ns", "p", early), nil, nil, true, time.Time{}},
		{"NoSchedule only: never (only NoExecute evicts)", testobj.Pod("ns", "p", early), []v1.Taint{noSched}, nil, true, time.Time{}},
		{"scheduled on tainted node, no toleration: at once", testobj.Pod("ns", "p", early), []v1.Taint{noExec}, nil, false, t0},
		{"finite toleration: at its end", testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(10))), []v1.Taint{noExec}, nil, false, t0.Add(10 * time.Second)},
		{"infinite toleration: never", testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", nil)), []v1.Taint{noExec}, nil, true, time.Time{}},
		{"infinite toleration of another value: at once", testobj.Pod("ns", "p", early, toleration("testTaint1", "other", nil)), []v1.Taint{noExec}, nil, false, t0},
		{"toleration of another key: at once", testobj.Pod("ns", "p", early, toleration("otherKey", "testTaint1", nil)), []v1.Taint{noExec}, nil, false, t0},
		{"tolerationSeconds 0: at once", testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(0))), []v1.Taint{noExec}, nil, false, t0},
		{"negative tolerationSeconds: at once", testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(-5))), []v1.Taint{noExec}, nil, false, t0},
		{"two taints, one tolerated: at once", testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", nil)), []v1.Taint{noExec, noExec2}, nil, false, t0},
		{"two taints, both tolerated, minimum wins, clock from the earliest taint",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(300)), toleration("testTaint2", "testTaint2", seconds(100))),
			[]v1.Taint{noExec, noExec2}, nil, false, t0.Add(100 * time.Second)},
		{"two taints, one forever one finite: the finite one",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", nil), toleration("testTaint2", "testTaint2", seconds(30))),
			[]v1.Taint{noExec, noExec2}, nil, false, t0.Add(30 * time.Second)},
		{"Exists toleration of any key, forever: never", testobj.Pod("ns", "p", early, testobj.Toleration(v1.Toleration{Operator: v1.TolerationOpExists})), []v1.Taint{noExec}, nil, true, time.Time{}},
		{"toleration for NoSchedule only does not tolerate NoExecute: at once", testobj.Pod("ns", "p", early, testobj.Toleration(v1.Toleration{Key: "testTaint1", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule})), []v1.Taint{noExec}, nil, false, t0},
		{"pod bound after the taint: its toleration counts from its arrival",
			testobj.Pod("ns", "p", testobj.ScheduledAt(t0.Add(time.Minute)), toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{noExec}, nil, false, t0.Add(2 * time.Minute)},
		{"no PodScheduled condition: creation time is the arrival",
			testobj.Pod("ns", "p", testobj.CreatedAt(t0.Add(time.Minute)), toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{noExec}, nil, false, t0.Add(2 * time.Minute)},
		{"timeAdded, seen within its second: from the sighting",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{noExec}, func(v1.Taint) time.Time { return t0.Add(400 * time.Millisecond) }, false, t0.Add(60*time.Second + 400*time.Millisecond)},
		{"timeAdded, seen long after (a restart): the end of its second, never the restart",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{noExec}, seenAt, false, t0.Add(61 * time.Second)},
		{"timeAdded after the sighting (clock skew): timeAdded",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{noExec}, func(v1.Taint) time.Time { return t0.Add(-5 * time.Second) }, false, t0.Add(60 * time.Second)},
		{"taint without timeAdded: from the controller's first sighting",
			testobj.Pod("ns", "p", early, toleration("testTaint1", "testTaint1", seconds(60))), []v1.Taint{taint("testTaint1", "testTaint1", v1.TaintEffectNoExecute, nil)}, seenAt, false, t0.Add(70 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := EvictAt(tc.pod, tc.taints, tc.seen)
			if got.Never != tc.never || (!tc.never && !got.At.Equal(tc.at)) {
				t.Errorf("EvictAt = %+v, want never=%v at %s", got, tc.never, tc.at)
			}
			if got.Why == "" {
				t.Error("EvictAt gave no reason")
			}
		})
	}
}

// TestMinTolerationTime is upstream's getMinTolerationTime table.
func TestMinTolerationTime(t *testing.T) {
	tests := []struct {
		name string
		tols []v1.Toleration
		want time.Duration
	}{
		{"no tolerations: now", nil, 0},
		{"one without seconds: forever", []v1.Toleration{{}}, -1},
		{"negative: now", []v1.Toleration{{TolerationSeconds: seconds(-1)}}, 0},
		{"zero: now", []v1.Toleration{{TolerationSeconds: seconds(0)}}, 0},
		{"positive", []v1.Toleration{{TolerationSeconds: seconds(10)}}, 10 * time.Second},
		{"forever and finite: the finite one", []v1.Toleration{{}, {TolerationSeconds: seconds(20)}}, 20 * time.Second},
		{"minimum of several", []v1.Toleration{{TolerationSeconds: seconds(30)}, {TolerationSeconds: seconds(20)}, {TolerationSeconds: seconds(40)}}, 20 * time.Second},
		{"any zero wins", []v1.Toleration{{TolerationSeconds: seconds(30)}, {TolerationSeconds: seconds(0)}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MinTolerationTime(tc.tols); got != tc.want {
				t.Errorf("MinTolerationTime = %v, want %v", got, tc.want)
			}
		})
	}
}
