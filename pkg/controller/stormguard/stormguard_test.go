package stormguard

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"fenceline.io/fenceline/internal/testobj"
)

// zone returns a zone of healthy and unhealthy nodes, named
// <zone>-h<i> and <zone>-u<i>.
func zone(name string, healthy, unhealthy int) []NodeHealth {
	var out []NodeHealth
	for i := range healthy {
		out = append(out, NodeHealth{Name: fmt.Sprintf("%s-h%d", name, i), Zone: name, Healthy: true})
	}
	for i := range unhealthy {
		out = append(out, NodeHealth{Name: fmt.Sprintf("%s-u%d", name, i), Zone: name})
	}
	return out
}

func cluster(zones ...[]NodeHealth) []NodeHealth {
	var out []NodeHealth
	for _, z := range zones {
		out = append(out, z...)
	}
	return out
}

// fencing marks the named nodes as being fenced.
func fencing(nodes []NodeHealth, names ...string) []NodeHealth {
	for i := range nodes {
		for _, n := range names {
			if nodes[i].Name == n {
				nodes[i].Fencing = true
			}
		}
	}
	return nodes
}

func pct(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
func count(n int) *intstr.IntOrString  { v := intstr.FromInt32(int32(n)); return &v }

// input is a candidate a-u0 in a healthy 10-node zone "a", under a policy
// whose maxUnhealthy (100%) stays out of the way of the other rules.
func input() Input {
	return Input{
		Candidate: Candidate{Name: "a-u0", Zone: "a"},
		Nodes:     zone("a", 9, 1),
		Policy: Policy{
			MaxConcurrentFencing: 1,
			MaxUnhealthy:         pct("100%"),
			Zones:                ZoneRules{ZoneLabel: "topology.kubernetes.io/zone", UnhealthyZoneThreshold: 0.55, LargeClusterSize: 50, PartialDisruptionRate: 0.01},
			FullDisruption:       FullDisruptionStop,
			Cooldown:             30 * time.Second,
			MaxAttempts:          5,
		},
		Bucket: Bucket{QPS: 0.1, Burst: 2},
		Now:    testobj.Epoch,
	}
}

func TestAdmit(t *testing.T) {
	now := testobj.Epoch
	type want struct {
		admit  bool
		reason string
		retry  time.Duration
		final  bool
	}
	ok := want{admit: true, reason: ReasonAdmitted}
	tests := []struct {
		name string
		edit func(*Input)
		want want
	}{
		{"healthy cluster, one dead node", func(*Input) {}, ok},

		// Rule 1: unusable inputs fence nothing.
		{"maxConcurrentFencing 0", func(in *Input) { in.Policy.MaxConcurrentFencing = 0 }, want{reason: ReasonInvalidPolicy}},
		{"maxAttempts 0", func(in *Input) { in.Policy.MaxAttempts = 0 }, want{reason: ReasonInvalidPolicy}},
		{"neither maxUnhealthy nor minHealthy", func(in *Input) { in.Policy.MaxUnhealthy = nil }, want{reason: ReasonInvalidPolicy}},
		{"both maxUnhealthy and minHealthy", func(in *Input) { in.Policy.MinHealthy = pct("51%") }, want{reason: ReasonInvalidPolicy}},
		{"maxUnhealthy not a percent", func(in *Input) { in.Policy.MaxUnhealthy = pct("lots") }, want{reason: ReasonInvalidPolicy}},
		{"maxUnhealthy negative count", func(in *Input) { in.Policy.MaxUnhealthy = count(-1) }, want{reason: ReasonInvalidPolicy}},
		{"maxUnhealthy negative percent", func(in *Input) { in.Policy.MaxUnhealthy = pct("-10%") }, want{reason: ReasonInvalidPolicy}},
		{"zone threshold 0", func(in *Input) { in.Policy.Zones.UnhealthyZoneThreshold = 0 }, want{reason: ReasonInvalidPolicy}},
		{"zone threshold above 1", func(in *Input) { in.Policy.Zones.UnhealthyZoneThreshold = 1.5 }, want{reason: ReasonInvalidPolicy}},
		{"negative cooldown", func(in *Input) { in.Policy.Cooldown = -time.Second }, want{reason: ReasonInvalidPolicy}},
		{"rate qps 0", func(in *Input) { in.Bucket.QPS = 0 }, want{reason: ReasonInvalidPolicy}},
		{"rate burst 0", func(in *Input) { in.Bucket.Burst = 0 }, want{reason: ReasonInvalidPolicy}},
		{"no node observed", func(in *Input) { in.Nodes = nil }, want{reason: ReasonNoNodes}},
		{"candidate not observed", func(in *Input) { in.Candidate.Name = "gone" }, want{reason: ReasonCandidateNotObserved}},
		{"candidate observed in another zone", func(in *Input) { in.Candidate.Zone = "b" }, want{reason: ReasonCandidateNotObserved}},
		{"candidate healthy in the view", func(in *Input) { in.Candidate.Name = "a-h0" }, want{reason: ReasonCandidateHealthy}},
		{"no zone label: the \"\" zone, as upstream", func(in *Input) {
			in.Nodes, in.Candidate = zone("", 9, 1), Candidate{Name: "-u0"}
		}, ok},

		// Rule 2: attempts.
		{"attempt 5 of 5 may run", func(in *Input) { in.Attempts = 4 }, ok},
		{"5 attempts made, maxAttempts 5", func(in *Input) { in.Attempts = 5 }, want{reason: ReasonMaxAttemptsReached, final: true}},

		// Rule 3: master disruption.
		{"every node of the only zone unhealthy", func(in *Input) { in.Nodes = zone("a", 0, 10) }, want{reason: ReasonAllZonesFullyDisrupted}},
		{"single-node cluster, node dead", func(in *Input) { in.Nodes = zone("a", 0, 1) }, want{reason: ReasonAllZonesFullyDisrupted}},
		{"every zone fully disrupted", func(in *Input) { in.Nodes = cluster(zone("a", 0, 3), zone("b", 0, 3)) }, want{reason: ReasonAllZonesFullyDisrupted}},
		{"one zone fully disrupted, another healthy: normal rate, as upstream", func(in *Input) { in.Nodes = cluster(zone("a", 0, 3), zone("b", 3, 0)) }, ok},

		// Rule 4: maxUnhealthy / minHealthy (NHC), storm and cooldown.
		{"maxUnhealthy 2, 2 unhealthy", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = count(2), zone("a", 8, 2) }, ok},
		{"maxUnhealthy 2, 3 unhealthy: storm", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = count(2), zone("a", 7, 3) }, want{reason: ReasonStormActive}},
		{"maxUnhealthy 33% of 10 rounds down to 3: 3 unhealthy", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = pct("33%"), zone("a", 7, 3) }, ok},
		{"maxUnhealthy 33% of 10 rounds down to 3: 4 unhealthy", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = pct("33%"), zone("a", 6, 4) }, want{reason: ReasonStormActive}},
		{"maxUnhealthy 33% of 3 rounds down to 0: 1 unhealthy", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = pct("33%"), zone("a", 2, 1) }, want{reason: ReasonStormActive}},
		{"maxUnhealthy 34% of 3 rounds down to 1: 1 unhealthy", func(in *Input) { in.Policy.MaxUnhealthy, in.Nodes = pct("34%"), zone("a", 2, 1) }, ok},
		{"maxUnhealthy 0: nothing", func(in *Input) { in.Policy.MaxUnhealthy = count(0) }, want{reason: ReasonStormActive}},
		{"minHealthy 51% of 10 rounds up to 6: 6 healthy", func(in *Input) {
			in.Policy.MaxUnhealthy, in.Policy.MinHealthy, in.Nodes = nil, pct("51%"), zone("a", 6, 4)
		}, ok},
		{"minHealthy 51% of 10 rounds up to 6: 5 healthy", func(in *Input) {
			in.Policy.MaxUnhealthy, in.Policy.MinHealthy, in.Nodes = nil, pct("51%"), zone("a", 5, 5)
		}, want{reason: ReasonStormActive}},
		{"storm clears now: cooldown starts", func(in *Input) { in.Storm = Storm{Active: true, Since: now.Add(-time.Minute)} }, want{reason: ReasonStormCooldownActive, retry: 30 * time.Second}},
		{"storm ended 10 s ago: 20 s of cooldown left", func(in *Input) { in.Storm.LastExit = now.Add(-10 * time.Second) }, want{reason: ReasonStormCooldownActive, retry: 20 * time.Second}},
		{"storm ended exactly a cooldown ago", func(in *Input) { in.Storm.LastExit = now.Add(-30 * time.Second) }, ok},
		{"storm clears now, no cooldown", func(in *Input) { in.Storm, in.Policy.Cooldown = Storm{Active: true}, 0 }, ok},

		// Rule 5: partial disruption of the candidate's zone.
		{"10 of 20 unhealthy (50%): normal", func(in *Input) { in.Nodes = zone("a", 10, 10) }, ok},
		{"exactly 55% (11 of 20): partial, small zone, rate 0", func(in *Input) { in.Nodes = zone("a", 9, 11) }, want{reason: ReasonZonePartialDisruption}},
		{"2 of 3 unhealthy: not more than 2, normal", func(in *Input) { in.Nodes = zone("a", 1, 2) }, ok},
		{"3 of 4 unhealthy: partial", func(in *Input) { in.Nodes = zone("a", 1, 3) }, want{reason: ReasonZonePartialDisruption}},
		{"zone of exactly largeClusterSize (50), partial: rate 0", func(in *Input) { in.Nodes = zone("a", 20, 30) }, want{reason: ReasonZonePartialDisruption}},
		{"zone of 60, partial: secondary rate", func(in *Input) { in.Nodes = zone("a", 26, 34) }, ok},
		{"zone of 60, partial, partialDisruptionRate 0", func(in *Input) { in.Nodes, in.Policy.Zones.PartialDisruptionRate = zone("a", 26, 34), 0 }, want{reason: ReasonZonePartialDisruption}},
		{"zone of 60, partial, one token left from the normal rate: burst is 1", func(in *Input) {
			in.Nodes, in.Bucket.Tokens, in.Bucket.Last = zone("a", 26, 34), 0.5, now
		}, want{reason: ReasonRateLimited, retry: 50 * time.Second}},
		{"another zone partial, the candidate's normal", func(in *Input) { in.Nodes = cluster(zone("a", 9, 1), zone("b", 1, 3)) }, ok},

		// Rule 6: concurrency.
		{"one other node being fenced, max 1", func(in *Input) { in.Nodes = fencing(zone("a", 8, 2), "a-u1") }, want{reason: ReasonMaxConcurrentFencing}},
		{"one other node being fenced, max 2", func(in *Input) { in.Nodes, in.Policy.MaxConcurrentFencing = fencing(zone("a", 8, 2), "a-u1"), 2 }, ok},
		{"the candidate itself being fenced (a retry) holds its own slot", func(in *Input) { in.Nodes = fencing(zone("a", 9, 1), "a-u0") }, ok},

		// Rule 7: the token bucket.
		{"bucket empty, just used", func(in *Input) { in.Bucket.Tokens, in.Bucket.Last = 0, now }, want{reason: ReasonRateLimited, retry: 10 * time.Second}},
		{"bucket at 0.5 a second ago: 0.6, 4 s to go", func(in *Input) { in.Bucket.Tokens, in.Bucket.Last = 0.5, now.Add(-time.Second) }, want{reason: ReasonRateLimited, retry: 4 * time.Second}},
		{"bucket empty 10 s ago: refilled", func(in *Input) { in.Bucket.Last = now.Add(-10 * time.Second) }, ok},
		{"clock went back: no refill", func(in *Input) { in.Bucket.Tokens, in.Bucket.Last = 0, now.Add(time.Hour) }, want{reason: ReasonRateLimited, retry: 10 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := input()
			tc.edit(&in)
			got := Admit(in)
			if (want{got.Admit, got.Reason, got.RetryAfter, got.Final}) != tc.want || got.Why == "" {
				t.Errorf("Admit() = %+v, want %+v with a reason", got, tc.want)
			}
		})
	}
}

func TestAdmitState(t *testing.T) {
	now := testobj.Epoch
	t.Run("a fresh bucket starts full and gives a token", func(t *testing.T) {
		got := Admit(input())
		if want := (Bucket{QPS: 0.1, Burst: 2, Tokens: 1, Last: now}); !got.Admit || got.NewBucket != want {
			t.Errorf("NewBucket = %+v, want %+v", got.NewBucket, want)
		}
	})
	t.Run("a refusal before the bucket leaves it alone", func(t *testing.T) {
		in := input()
		in.Nodes = fencing(zone("a", 8, 2), "a-u1")
		in.Bucket.Tokens, in.Bucket.Last = 1, now.Add(-time.Hour)
		if got := Admit(in); got.NewBucket != in.Bucket {
			t.Errorf("NewBucket = %+v, want %+v", got.NewBucket, in.Bucket)
		}
	})
	t.Run("a storm starts when the limit is breached, whatever refuses", func(t *testing.T) {
		in := input()
		in.Policy.MaxUnhealthy, in.Nodes = count(1), zone("a", 0, 3)
		got := Admit(in)
		if got.Reason != ReasonAllZonesFullyDisrupted || got.NewStorm != (Storm{Active: true, Since: now}) {
			t.Errorf("Admit() = %+v, want refused for full disruption, storm from now", got)
		}
	})
	t.Run("an active storm keeps its start", func(t *testing.T) {
		in := input()
		in.Policy.MaxUnhealthy, in.Storm = count(0), Storm{Active: true, Since: now.Add(-time.Minute)}
		if got := Admit(in); got.NewStorm != in.Storm {
			t.Errorf("NewStorm = %+v, want %+v", got.NewStorm, in.Storm)
		}
	})
	t.Run("a storm that clears records its exit", func(t *testing.T) {
		in := input()
		in.Storm = Storm{Active: true, Since: now.Add(-time.Minute), LastExit: now.Add(-time.Hour)}
		if got := Admit(in); got.NewStorm != (Storm{LastExit: now}) {
			t.Errorf("NewStorm = %+v, want exit now", got.NewStorm)
		}
	})
}

func TestComputeZoneState(t *testing.T) {
	tests := []struct {
		size, unhealthy int
		want            ZoneState
	}{
		{0, 0, Normal},
		{1, 1, FullDisruption},
		{3, 3, FullDisruption},
		{3, 2, Normal},
		{4, 3, PartialDisruption},
		{20, 10, Normal},
		{20, 11, PartialDisruption},
		{100, 54, Normal},
		{100, 55, PartialDisruption},
		{50, 49, PartialDisruption},
	}
	for _, tc := range tests {
		if got := ComputeZoneState(tc.size, tc.unhealthy, 0.55); got != tc.want {
			t.Errorf("ComputeZoneState(%d, %d, 0.55) = %s, want %s", tc.size, tc.unhealthy, got, tc.want)
		}
	}
}

func TestZoneOf(t *testing.T) {
	const label = "topology.kubernetes.io/zone"
	if got := ZoneOf(testobj.Node("n1", testobj.Label(label, "z1")), label); got != "z1" {
		t.Errorf("ZoneOf(labelled) = %q", got)
	}
	if got := ZoneOf(testobj.Node("n1"), label); got != "" {
		t.Errorf("ZoneOf(unlabelled) = %q, want the \"\" zone", got)
	}
	if got := ZoneOf(testobj.Node("n1", testobj.Label(label, "z1")), ""); got != "" {
		t.Errorf("ZoneOf(no zone label in the policy) = %q, want the \"\" zone", got)
	}
}
