package tainteviction

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// GuardConfig is the storm guard of evictions from nodes that are not
// Ready: node-fencing's guard (package stormguard) with the node lifecycle
// controller's eviction parameters. Upstream's taint eviction has no guard
// of its own and relies on the lifecycle controller's pace of tainting;
// Fenceline's also holds when the taints come faster than that (a human's
// or another controller's taints, a lifecycle controller run with other
// rates). A Ready node's evictions (a taint an operator put there) are not
// guarded, as upstream's are not.
type GuardConfig struct {
	// Rate is how many nodes per second may start having their pods
	// evicted (--node-eviction-rate, 0.1), burst one.
	Rate float64
	// Zones are the zone rules: a partially disrupted zone evicts at
	// Zones.PartialDisruptionRate, or not at all when it is small; when
	// every zone is fully disrupted nothing is evicted.
	Zones stormguard.ZoneRules
}

// DefaultGuard returns kube-controller-manager's defaults.
func DefaultGuard() GuardConfig {
	return GuardConfig{
		Rate: 0.1,
		Zones: stormguard.ZoneRules{
			ZoneLabel:              v1.LabelTopologyZone,
			UnhealthyZoneThreshold: 0.55,
			LargeClusterSize:       50,
			PartialDisruptionRate:  0.01,
		},
	}
}

// AddFlags defines the guard's flags on fs: kube-controller-manager's
// node-eviction flags under taint-eviction- names.
func (g *GuardConfig) AddFlags(fs *flag.FlagSet) {
	fs.Float64Var(&g.Rate, "taint-eviction-rate", g.Rate,
		"taint-eviction (feature gate TaintEviction): nodes per second, burst 1, whose pods may start being evicted while they are not Ready (kube-controller-manager's --node-eviction-rate).")
	fs.Float64Var(&g.Zones.PartialDisruptionRate, "taint-eviction-secondary-rate", g.Zones.PartialDisruptionRate,
		"taint-eviction: the rate in a partially disrupted zone larger than --taint-eviction-large-cluster-size; smaller such zones evict nothing (--secondary-node-eviction-rate).")
	fs.Float64Var(&g.Zones.UnhealthyZoneThreshold, "taint-eviction-unhealthy-zone-threshold", g.Zones.UnhealthyZoneThreshold,
		"taint-eviction: the fraction of a zone's nodes not Ready (with more than two) that makes it partially disrupted (--unhealthy-zone-threshold).")
	fs.IntVar(&g.Zones.LargeClusterSize, "taint-eviction-large-cluster-size", g.Zones.LargeClusterSize,
		"taint-eviction: a zone of at most this many nodes evicts nothing while partially disrupted (--large-cluster-size-threshold).")
	fs.StringVar(&g.Zones.ZoneLabel, "taint-eviction-zone-label", g.Zones.ZoneLabel, "taint-eviction: the node label that names a node's zone.")
}

// Validate reports values the guard cannot enforce, by their flags.
func (g GuardConfig) Validate() error {
	var errs []error
	if !(g.Rate > 0) {
		errs = append(errs, fmt.Errorf("--taint-eviction-rate is %v, must be positive", g.Rate))
	}
	if z := g.Zones.PartialDisruptionRate; !(z >= 0) {
		errs = append(errs, fmt.Errorf("--taint-eviction-secondary-rate is %v, must not be negative", z))
	}
	if z := g.Zones.UnhealthyZoneThreshold; !(z > 0 && z <= 1) {
		errs = append(errs, fmt.Errorf("--taint-eviction-unhealthy-zone-threshold is %v, must be in (0, 1]", z))
	}
	if n := g.Zones.LargeClusterSize; n < 0 {
		errs = append(errs, fmt.Errorf("--taint-eviction-large-cluster-size is %d, must not be negative", n))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The guard's own checks, as a backstop.
	return errors.Join(g.policy().Validate(), g.bucket().Validate())
}

// policy maps the config onto stormguard.Policy. The fencing-only rules
// are made inert: every node may be unhealthy (upstream's eviction has no
// maxUnhealthy; the zone rules and the full-disruption stop are its storm
// rules), no bound on concurrent fences, and one attempt that is never
// used up.
func (g GuardConfig) policy() stormguard.Policy {
	all := intstr.FromString("100%")
	return stormguard.Policy{
		MaxConcurrentFencing: math.MaxInt32,
		MaxUnhealthy:         &all,
		Zones:                g.Zones,
		FullDisruption:       stormguard.FullDisruptionStop,
		MaxAttempts:          1,
	}
}

func (g GuardConfig) bucket() stormguard.Bucket {
	return stormguard.Bucket{QPS: g.Rate, Burst: 1}
}

// guard admits nodes to eviction. A node admitted stays admitted until it
// is Ready or untainted again (Forget), so all its pods go once it is in;
// the bucket and the refusals live in memory (a restarted controller
// starts with a full bucket, as the lifecycle controller does).
type guard struct {
	cfg      GuardConfig
	mu       sync.Mutex
	bucket   stormguard.Bucket
	storm    stormguard.Storm
	admitted map[string]bool
	refused  map[string]string // node -> reason last refused for
}

func newGuard(cfg GuardConfig) *guard {
	return &guard{cfg: cfg, bucket: cfg.bucket(), admitted: map[string]bool{}, refused: map[string]string{}}
}

// Admit decides whether the node's evictions may start, on the given view
// of every node.
func (g *guard) Admit(node *v1.Node, nodes []*v1.Node, now time.Time) stormguard.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted[node.Name] {
		return stormguard.Decision{Admit: true, Reason: stormguard.ReasonAdmitted, Why: "admitted before"}
	}
	view := make([]stormguard.NodeHealth, 0, len(nodes))
	for _, n := range nodes {
		view = append(view, stormguard.NodeHealth{Name: n.Name, Zone: stormguard.ZoneOf(n, g.cfg.Zones.ZoneLabel), Healthy: nodeutil.IsReady(n)})
	}
	d := stormguard.Admit(stormguard.Input{
		Candidate: stormguard.Candidate{Name: node.Name, Zone: stormguard.ZoneOf(node, g.cfg.Zones.ZoneLabel)},
		Nodes:     view, Policy: g.cfg.policy(), Bucket: g.bucket, Storm: g.storm, Now: now,
	})
	g.bucket, g.storm = d.NewBucket, d.NewStorm
	if d.Admit {
		g.admitted[node.Name] = true
		delete(g.refused, node.Name)
	}
	return d
}

// Changed records a refusal and reports whether its reason is new for the
// node (so the Event is recorded once per reason).
func (g *guard) Changed(node, reason string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	changed := g.refused[node] != reason
	g.refused[node] = reason
	return changed
}

// Refused lists the nodes refused and not admitted since.
func (g *guard) Refused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.refused))
	for n := range g.refused {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Forget ends a node's admission or refusal: it is Ready, untainted or gone.
func (g *guard) Forget(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.admitted, node)
	delete(g.refused, node)
}

// String describes the config for logs.
func (g GuardConfig) String() string {
	return fmt.Sprintf("rate %v/s, zone label %q, unhealthy-zone threshold %v, large cluster %d, partial-disruption rate %v/s",
		g.Rate, g.Zones.ZoneLabel, g.Zones.UnhealthyZoneThreshold, g.Zones.LargeClusterSize, g.Zones.PartialDisruptionRate)
}
