package bench

import (
	"math"
	"strings"
	"testing"
)

func TestStages(t *testing.T) {
	tests := []struct {
		name string
		in   []Milestone
		want []Stage
	}{
		{name: "none", in: nil, want: nil},
		{
			name: "overlapping milestones are ordered by time and the increments add up",
			in: []Milestone{
				{Name: "VA gone", Seconds: 3.4, Owner: "adc"},
				{Name: "pods deleted", Seconds: 0.4, Owner: "fenceline"},
				{Name: "scheduled", Seconds: 3.0, Owner: "sts"},
				{Name: "running", Seconds: 6.0, Owner: "kubelet"},
				{Name: "not measured", Seconds: -1, Owner: "x"},
			},
			want: []Stage{
				{From: "taint", To: "pods deleted", Owner: "fenceline", Seconds: 0.4, Share: 0.4 / 6},
				{From: "pods deleted", To: "scheduled", Owner: "sts", Seconds: 2.6, Share: 2.6 / 6},
				{From: "scheduled", To: "VA gone", Owner: "adc", Seconds: 0.4, Share: 0.4 / 6},
				{From: "VA gone", To: "running", Owner: "kubelet", Seconds: 2.6, Share: 2.6 / 6},
			},
		},
		{
			name: "all at zero: no share is divided by zero",
			in:   []Milestone{{Name: "a", Seconds: 0, Owner: "o"}},
			want: []Stage{{From: "taint", To: "a", Owner: "o"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Stages("taint", tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d stages %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.From != w.From || g.To != w.To || g.Owner != w.Owner ||
					math.Abs(g.Seconds-w.Seconds) > 1e-9 || math.Abs(g.Share-w.Share) > 1e-9 {
					t.Errorf("stage %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestStageTableTotalsPerOwner(t *testing.T) {
	out := StageTable([]Stage{
		{From: "t", To: "a", Owner: "kcm", Seconds: 1, Share: 0.25},
		{From: "a", To: "b", Owner: "us", Seconds: 1, Share: 0.25},
		{From: "b", To: "c", Owner: "kcm", Seconds: 2, Share: 0.5},
	})
	for _, want := range []string{"total   kcm        3.00  75 %", "total   us         1.00  25 %"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestFailoverMilestonesChargePodDeletion(t *testing.T) {
	m := map[string]Summary{mPodsDeleted: {N: 1, Median: 0.4}, mVAsGone: {N: 1, Median: 3.4}, mRunning: {N: 0}}
	for config, want := range map[string]string{"U": "kube-controller-manager (pod GC)", "F": "fenceline-controller"} {
		got := failoverMilestones(config, m)
		if len(got) != 2 {
			t.Fatalf("%s: %d milestones %+v, want the 2 measured ones", config, len(got), got)
		}
		if got[0].Name != "last stuck pod deleted" || got[0].Owner != want {
			t.Errorf("%s: first milestone %+v, want the pods' deletion by %s", config, got[0], want)
		}
	}
}
