package nodefencing

import (
	"math"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/stormguard"
)

// classes indexes FenceClasses by name, as PolicyProblem takes them.
func classes(cs ...*fencingv1alpha1.FenceClass) map[string]*fencingv1alpha1.FenceClass {
	out := map[string]*fencingv1alpha1.FenceClass{}
	for _, c := range cs {
		out[c.Name] = c
	}
	return out
}

// badSelector does not parse (an unknown operator).
var badSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Near", Values: []string{"x"}}}}

func TestResolvePolicy(t *testing.T) {
	worker := testobj.Node("n1", testobj.Label("role", "worker"))
	workers := testobj.FencePolicy("workers", testobj.Selecting("role", "worker"))
	dbs := testobj.FencePolicy("dbs", testobj.Selecting("role", "db"))
	all := testobj.FencePolicy("all")
	everyLabel := testobj.FencePolicy("every-label", testobj.NodeSelector(&metav1.LabelSelector{}))
	broken := testobj.FencePolicy("broken", testobj.NodeSelector(badSelector))

	tests := []struct {
		name     string
		node     *v1.Node
		named    string
		policies []*fencingv1alpha1.FencePolicy
		want     string // the policy's name, "" for none
		problem  string // a part of the problem, "" for none
	}{
		{"named policy", worker, "dbs", []*fencingv1alpha1.FencePolicy{workers, dbs}, "dbs", ""},
		{"named policy wins over an overlap", worker, "workers", []*fencingv1alpha1.FencePolicy{workers, all}, "workers", ""},
		{"named policy that does not exist", worker, "gone", []*fencingv1alpha1.FencePolicy{workers}, "", `FencePolicy "gone" does not exist`},
		{"named policy of a deleted node", nil, "workers", []*fencingv1alpha1.FencePolicy{workers}, "workers", ""},
		{"unique match", worker, "", []*fencingv1alpha1.FencePolicy{dbs, workers}, "workers", ""},
		{"no match", worker, "", []*fencingv1alpha1.FencePolicy{dbs}, "", ""},
		{"no policy at all", worker, "", nil, "", ""},
		{"nil nodeSelector selects every node", testobj.Node("n1"), "", []*fencingv1alpha1.FencePolicy{dbs, all}, "all", ""},
		{"empty nodeSelector selects every node", testobj.Node("n1"), "", []*fencingv1alpha1.FencePolicy{dbs, everyLabel}, "every-label", ""},
		{"overlap: two policies select the node", worker, "", []*fencingv1alpha1.FencePolicy{workers, dbs, all}, "", "several FencePolicies (all, workers)"},
		{"overlap of three, names sorted", worker, "", []*fencingv1alpha1.FencePolicy{workers, everyLabel, all}, "", "(all, every-label, workers)"},
		{"a selector that does not parse selects nothing", worker, "", []*fencingv1alpha1.FencePolicy{broken}, "", ""},
		{"a broken selector does not hide a good one", worker, "", []*fencingv1alpha1.FencePolicy{broken, workers}, "workers", ""},
		{"deleted node, no name", nil, "", []*fencingv1alpha1.FencePolicy{all}, "", "the node does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problem := ResolvePolicy(tc.node, tc.named, tc.policies)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want {
				t.Errorf("ResolvePolicy() = %q, want %q", name, tc.want)
			}
			if (tc.problem == "") != (problem == "") || !strings.Contains(problem, tc.problem) {
				t.Errorf("ResolvePolicy() problem = %q, want one containing %q", problem, tc.problem)
			}
		})
	}
}

func TestPolicyProblem(t *testing.T) {
	bmc, pdu, onboard := testobj.FenceClass("bmc"), testobj.FenceClass("pdu"), testobj.FenceClass("onboard", testobj.SharesPowerWithNode())
	tests := []struct {
		name    string
		policy  *fencingv1alpha1.FencePolicy
		classes map[string]*fencingv1alpha1.FenceClass
		problem string // a part of the problem, "" for none
	}{
		{"usable", testobj.FencePolicy("p"), classes(bmc), ""},
		{"the class of its level is missing", testobj.FencePolicy("p"), classes(pdu), "names FenceClasses that do not exist: bmc"},
		{"every missing class named once", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "bmc", "x"), testobj.FenceLevel(2, "x", "y"))), classes(bmc), "do not exist: x, y"},
		{"no class at all", testobj.FencePolicy("p"), nil, "do not exist: bmc"},
		{"no level", testobj.FencePolicy("p", testobj.Levels()), classes(bmc), "has no level"},
		{"a nodeSelector that does not parse", testobj.FencePolicy("p", testobj.NodeSelector(badSelector)), classes(bmc), "nodeSelector"},
		{"only level shares power with the node, storage fence BestEffort", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "onboard")), testobj.StorageFence(fencingv1alpha1.StorageFenceBestEffort)), classes(onboard), "loses power with the node"},
		{"only level, one of its classes shares power, BestEffort", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "pdu", "onboard")), testobj.StorageFence(fencingv1alpha1.StorageFenceBestEffort)), classes(pdu, onboard), "FenceClass onboard"},
		{"only level shares power, storage fence Required", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "onboard")), testobj.StorageFence(fencingv1alpha1.StorageFenceRequired)), classes(onboard), ""},
		{"only level shares power, storage fence unset (Required by default)", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "onboard"))), classes(onboard), ""},
		{"shares power but an independent level follows", testobj.FencePolicy("p", testobj.Levels(testobj.FenceLevel(1, "onboard"), testobj.FenceLevel(2, "pdu")), testobj.StorageFence(fencingv1alpha1.StorageFenceBestEffort)), classes(onboard, pdu), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problem := PolicyProblem(tc.policy, tc.classes)
			if (tc.problem == "") != (problem == "") || !strings.Contains(problem, tc.problem) {
				t.Errorf("PolicyProblem() = %q, want one containing %q", problem, tc.problem)
			}
		})
	}
}

func TestGuardPolicyDefaults(t *testing.T) {
	pol, qps, burst := GuardPolicy(testobj.FencePolicy("p"))
	fiftyPercent := intstr.FromString("50%")
	want := stormguard.Policy{
		MaxConcurrentFencing: 1,
		MaxUnhealthy:         &fiftyPercent,
		Zones: stormguard.ZoneRules{
			ZoneLabel: v1.LabelTopologyZone, UnhealthyZoneThreshold: 0.55, LargeClusterSize: 50, PartialDisruptionRate: 0.01,
		},
		FullDisruption: stormguard.FullDisruptionStop,
		Cooldown:       30 * time.Second,
		MaxAttempts:    5,
	}
	if pol.MaxUnhealthy == nil || *pol.MaxUnhealthy != *want.MaxUnhealthy || pol.MinHealthy != nil {
		t.Errorf("GuardPolicy() maxUnhealthy = %v, minHealthy = %v; want 50%%, none", pol.MaxUnhealthy, pol.MinHealthy)
	}
	pol.MaxUnhealthy, want.MaxUnhealthy = nil, nil
	if pol != want {
		t.Errorf("GuardPolicy() of a policy with no stormGuard =\n%+v\nwant\n%+v", pol, want)
	}
	if qps != 0.1 || burst != 2 {
		t.Errorf("GuardPolicy() rate = %v/s burst %d, want 0.1/s burst 2", qps, burst)
	}
	pol, qps, burst = GuardPolicy(testobj.FencePolicy("p"))
	if err := pol.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	if err := (stormguard.Bucket{QPS: qps, Burst: burst}).Validate(); err != nil {
		t.Errorf("the default rate does not validate: %v", err)
	}
	// The defaults let a cluster of two or three nodes fence one.
	for _, size := range []int{2, 3} {
		nodes := []stormguard.NodeHealth{{Name: "dead"}}
		for i := 1; i < size; i++ {
			nodes = append(nodes, stormguard.NodeHealth{Name: "n" + string(rune('0'+i)), Healthy: true})
		}
		d := stormguard.Admit(stormguard.Input{Candidate: stormguard.Candidate{Name: "dead"}, Nodes: nodes, Policy: pol,
			Bucket: stormguard.Bucket{QPS: qps, Burst: burst}, Now: testobj.Epoch})
		if !d.Admit {
			t.Errorf("default storm guard, %d nodes, one dead: refused (%s: %s)", size, d.Reason, d.Why)
		}
	}
}

func TestGuardPolicySet(t *testing.T) {
	threshold, rate, qps := resource.MustParse("0.7"), resource.MustParse("0.5"), resource.MustParse("2")
	p := testobj.FencePolicy("p", testobj.MaxConcurrentFencing(3), testobj.MaxUnhealthy(intstr.FromInt32(4)), testobj.MaxAttempts(7))
	p.Spec.StormGuard.ZoneLabel = "example.com/rack"
	p.Spec.StormGuard.UnhealthyZoneThreshold = &threshold
	p.Spec.StormGuard.PartialDisruptionRate = &rate
	p.Spec.StormGuard.LargeClusterSize = 10
	p.Spec.StormGuard.Cooldown = &metav1.Duration{Duration: time.Minute}
	p.Spec.StormGuard.Rate = fencingv1alpha1.FenceRate{QPS: &qps, Burst: 5}

	pol, gotQPS, burst := GuardPolicy(p)
	z := pol.Zones
	if pol.MaxConcurrentFencing != 3 || pol.MaxUnhealthy.IntValue() != 4 || pol.MaxAttempts != 7 || pol.Cooldown != time.Minute ||
		z.ZoneLabel != "example.com/rack" || !near(z.UnhealthyZoneThreshold, 0.7) || z.LargeClusterSize != 10 || !near(z.PartialDisruptionRate, 0.5) {
		t.Errorf("GuardPolicy() = %+v, want the policy's values", pol)
	}
	if !near(gotQPS, 2) || burst != 5 {
		t.Errorf("GuardPolicy() rate = %v/s burst %d, want 2/s burst 5", gotQPS, burst)
	}
	if err := pol.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

// near compares a quantity read as a float (resource.Quantity's
// AsApproximateFloat64 is approximate: "0.7" reads 0.7000000000000001).
func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

func TestPolicyAccessors(t *testing.T) {
	def := testobj.FencePolicy("p")
	if MaxAttempts(def) != 5 || MaxAttempts(nil) != 5 || MaxAttempts(testobj.FencePolicy("p", testobj.MaxAttempts(2))) != 2 {
		t.Errorf("MaxAttempts: default %d, nil %d, set %d; want 5, 5, 2", MaxAttempts(def), MaxAttempts(nil), MaxAttempts(testobj.FencePolicy("p", testobj.MaxAttempts(2))))
	}
	if HealthyDelay(def) != 10*time.Second || HealthyDelay(testobj.FencePolicy("p", testobj.HealthyDelay(time.Minute))) != time.Minute {
		t.Errorf("HealthyDelay: default %s, set %s; want 10s, 1m", HealthyDelay(def), HealthyDelay(testobj.FencePolicy("p", testobj.HealthyDelay(time.Minute))))
	}
	if !AppliesOutOfService(def) || AppliesOutOfService(testobj.FencePolicy("p", testobj.NoOutOfServiceTaint())) {
		t.Error("AppliesOutOfService: want true by default, false with None")
	}
	if !UnfencesOnNewBoot(def) || UnfencesOnNewBoot(testobj.FencePolicy("p", testobj.ManualUnfence())) {
		t.Error("UnfencesOnNewBoot: want true by default, false with Manual")
	}
	if !AutomaticApproval(def) || AutomaticApproval(testobj.FencePolicy("p", testobj.ManualApproval())) {
		t.Error("AutomaticApproval: want true by default, false with Manual")
	}
}

func TestDetectRules(t *testing.T) {
	r := DetectRules(testobj.FencePolicy("p"))
	if r.LeaseStaleAfter != detect.DefaultLeaseStaleAfter || len(r.Conditions) != 0 || !r.Selector.Empty() {
		t.Errorf("DetectRules() of a default policy = %+v, want the default stale age, no condition, every node", r)
	}
	p := testobj.FencePolicy("p", testobj.Selecting("role", "worker"))
	p.Spec.Detection.LeaseStaleAfter = &metav1.Duration{Duration: time.Minute}
	p.Spec.Detection.UnhealthyConditions = []fencingv1alpha1.UnhealthyCondition{{Type: "Ready", Status: metav1.ConditionUnknown, Duration: metav1.Duration{Duration: 30 * time.Second}}}
	r = DetectRules(p)
	want := detect.ConditionRule{Type: v1.NodeReady, Status: v1.ConditionUnknown, Duration: 30 * time.Second}
	if r.LeaseStaleAfter != time.Minute || len(r.Conditions) != 1 || r.Conditions[0] != want || r.Selector.String() != "role=worker" {
		t.Errorf("DetectRules() = %+v, want a 1m stale age, the Ready=Unknown 30s rule, role=worker", r)
	}
	// A selector that does not parse selects nothing, so detection is off.
	now := testobj.Epoch
	v := detect.Unhealthy(testobj.Node("n1", testobj.UnknownSince(now.Add(-time.Hour))), detect.Snapshot(testobj.Lease("n1", now.Add(-time.Hour)), now), DetectRules(testobj.FencePolicy("p", testobj.NodeSelector(badSelector))), now)
	if v.Candidate {
		t.Errorf("a policy whose selector does not parse made a candidate: %+v", v)
	}
}

// Writes of a policy's status alone (the storm guard's state, fence-
// coverage's finding) re-queue no node; a spec change re-queues them all.
func TestPolicySpecChanged(t *testing.T) {
	base := testobj.FencePolicy("p")
	base.Generation = 2
	statusOnly := base.DeepCopy()
	statusOnly.Status.Coverage = &fencingv1alpha1.FenceCoverage{SelectedNodes: 3}
	respec := base.DeepCopy()
	respec.Generation = 3
	relabelled := base.DeepCopy()
	relabelled.Labels = map[string]string{"team": "db"}
	noGeneration := testobj.FencePolicy("p") // a client that sets none (fake clients)
	tests := []struct {
		name     string
		old, cur any
		want     bool
	}{
		{"status written", base, statusOnly, false},
		{"spec changed", base, respec, true},
		{"labels changed", base, relabelled, true},
		{"no generation to compare", noGeneration, noGeneration.DeepCopy(), true},
		{"not a policy", base, "tombstone", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := false
			policySpecChanged(tt.old, tt.cur, func() { got = true })
			if got != tt.want {
				t.Errorf("enqueued %v, want %v", got, tt.want)
			}
		})
	}
}
