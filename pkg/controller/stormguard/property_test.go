package stormguard

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"fenceline.io/fenceline/internal/testobj"
)

// randomInput draws a cluster state and a policy. Health is drawn per
// cluster from a few fractions, so that fully disrupted zones, partial
// disruption and storms all come up often.
func randomInput(r *rand.Rand) Input {
	in := input()
	zones := []string{"", "a", "b", "c"}[:1+r.IntN(4)]
	healthyFraction := []float64{0, 0.1, 0.5, 0.9, 1}[r.IntN(5)]
	in.Nodes = nil
	for i := range r.IntN(70) {
		n := NodeHealth{Name: fmt.Sprintf("n%d", i), Zone: zones[r.IntN(len(zones))], Healthy: r.Float64() < healthyFraction}
		n.Fencing = !n.Healthy && r.IntN(3) == 0
		in.Nodes = append(in.Nodes, n)
	}
	if len(in.Nodes) > 0 && r.IntN(10) > 0 {
		c := in.Nodes[r.IntN(len(in.Nodes))]
		in.Candidate = Candidate{Name: c.Name, Zone: c.Zone}
	}
	p := &in.Policy
	p.MaxConcurrentFencing = 1 + r.IntN(3)
	if r.IntN(2) == 0 {
		p.MaxUnhealthy = count(r.IntN(80))
	} else {
		v := intstr.FromString(fmt.Sprintf("%d%%", r.IntN(101)))
		p.MaxUnhealthy = &v
	}
	p.Zones.LargeClusterSize = []int{0, 5, 50}[r.IntN(3)]
	p.Zones.PartialDisruptionRate = []float64{0, 0.01, 1}[r.IntN(3)]
	p.Cooldown = time.Duration(r.IntN(60)) * time.Second
	in.Attempts = r.IntN(6)
	in.Bucket = Bucket{QPS: 0.1 + r.Float64(), Burst: 1 + r.IntN(3), Tokens: 3 * r.Float64(), Last: in.Now.Add(-time.Duration(r.IntN(30)) * time.Second)}
	in.Storm = Storm{Active: r.IntN(4) == 0, LastExit: in.Now.Add(-time.Duration(r.IntN(120)) * time.Second)}
	return in
}

// TestAdmitProperties checks, over random cluster states, the storm-guard
// invariants: nothing is admitted while every zone is fully disrupted or
// no node is healthy, an admission never exceeds MaxConcurrentFencing nor
// maxUnhealthy, and it always takes a whole token.
func TestAdmitProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 2026))
	admitted := 0
	for i := range 20000 {
		in := randomInput(r)
		got := Admit(in)
		healthy, others := 0, 0
		for _, n := range in.Nodes {
			if n.Healthy {
				healthy++
			}
			if n.Fencing && n.Name != in.Candidate.Name {
				others++
			}
		}
		fail := func(why string) { t.Fatalf("case %d: %s\ninput %+v\ndecision %+v", i, why, in, got) }
		if !got.Admit {
			continue
		}
		admitted++
		if allFullyDisrupted(Zones(in.Nodes, in.Policy.Zones.UnhealthyZoneThreshold)) || healthy == 0 {
			fail("admitted while every zone is fully disrupted")
		}
		if others+1 > in.Policy.MaxConcurrentFencing {
			fail("admitted beyond maxConcurrentFencing")
		}
		if limit, _ := intstr.GetScaledValueFromIntOrPercent(in.Policy.MaxUnhealthy, len(in.Nodes), false); len(in.Nodes)-healthy > limit {
			fail("admitted beyond maxUnhealthy")
		}
		if got.NewBucket.Tokens < 0 || got.NewBucket.Tokens > float64(in.Bucket.Burst)-1 {
			fail("admitted without a whole token")
		}
	}
	if admitted < 100 {
		t.Fatalf("only %d of 20000 random states admitted: the generator does not exercise admission", admitted)
	}
}

// TestAdmitRate calls Admit at random instants on a cluster where only the
// bucket can refuse, carrying NewBucket from call to call: the number of
// admissions up to any instant never exceeds Burst + QPS × elapsed.
func TestAdmitRate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2026))
	in := input()
	in.Policy.MaxConcurrentFencing = 100
	in.Bucket = Bucket{QPS: 0.1, Burst: 2}
	start, admitted := testobj.Epoch, 0
	for i := range 5000 {
		in.Now = in.Now.Add(time.Duration(r.IntN(4000)) * time.Millisecond)
		got := Admit(in)
		in.Bucket = got.NewBucket
		if got.Admit {
			admitted++
		} else if got.Reason != ReasonRateLimited || got.RetryAfter <= 0 {
			t.Fatalf("call %d: refused for %s (%s), want only the rate limit", i, got.Reason, got.Why)
		}
		if bound := float64(in.Bucket.Burst) + in.Bucket.QPS*in.Now.Sub(start).Seconds(); float64(admitted) > bound {
			t.Fatalf("call %d: %d admissions after %s, above the bucket's %v", i, admitted, in.Now.Sub(start), bound)
		}
	}
}
