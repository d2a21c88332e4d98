package nodefencing

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
)

// Defaults of the FencePolicy fields the API server defaults too; a policy
// written before a default existed, or read from a fake client in a test,
// gets the same values here.
const (
	defaultMaxConcurrent = 1
	defaultHealthyDelay  = 10 * time.Second
	defaultCooldown      = 30 * time.Second
	defaultZoneThreshold = 0.55
	defaultPartialRate   = 0.01
	defaultLargeCluster  = 50
	defaultRateQPS       = 0.1
	defaultRateBurst     = 2
	defaultZoneLabel     = v1.LabelTopologyZone
	defaultMaxUnhealthy  = "50%"
)

// Selector is fencingreq.Selector: an unset nodeSelector selects every
// node, one that does not parse none.
func Selector(p *fencingv1alpha1.FencePolicy) labels.Selector { return fencingreq.Selector(p) }

// ResolvePolicy is fencingreq.ResolvePolicy, the resolution the fence
// agent shares.
func ResolvePolicy(node *v1.Node, name string, policies []*fencingv1alpha1.FencePolicy) (*fencingv1alpha1.FencePolicy, string) {
	return fencingreq.ResolvePolicy(node, name, policies)
}

// PolicyProblem states the cross-object rules that CEL cannot check (it
// sees one object): every FenceClass a level names exists; a selector that
// parses; a policy whose only level relies on devices that lose power with
// the node asks for the storage fence too. "" means the policy is usable.
func PolicyProblem(p *fencingv1alpha1.FencePolicy, classes map[string]*fencingv1alpha1.FenceClass) string {
	if p.Spec.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
			return fmt.Sprintf("FencePolicy %s: nodeSelector: %v", p.Name, err)
		}
	}
	if len(p.Spec.Levels) == 0 {
		return fmt.Sprintf("FencePolicy %s has no level", p.Name)
	}
	var missing []string
	for _, l := range p.Spec.Levels {
		for _, name := range l.FenceClassNames {
			if classes[name] == nil && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("FencePolicy %s names FenceClasses that do not exist: %s", p.Name, strings.Join(missing, ", "))
	}
	if len(p.Spec.Levels) == 1 && storageFence(p) != fencingv1alpha1.StorageFenceRequired {
		for _, name := range p.Spec.Levels[0].FenceClassNames {
			if classes[name].Spec.SharesPowerWithNode {
				return fmt.Sprintf("FencePolicy %s: its only level uses FenceClass %s, whose device loses power with the node; add a level with an independent device or set storageFence Required", p.Name, name)
			}
		}
	}
	return ""
}

func storageFence(p *fencingv1alpha1.FencePolicy) fencingv1alpha1.StorageFenceMode {
	if p.Spec.StorageFence == "" {
		return fencingv1alpha1.StorageFenceRequired
	}
	return p.Spec.StorageFence
}

// DetectRules turns the policy's detection into detect.Rules.
func DetectRules(p *fencingv1alpha1.FencePolicy) detect.Rules {
	r := detect.Rules{Selector: Selector(p), LeaseStaleAfter: duration(p.Spec.Detection.LeaseStaleAfter, detect.DefaultLeaseStaleAfter),
		// Empty is the default (a policy stored before the field existed).
		PowerCheck: p.Spec.Detection.PowerCheck != fencingv1alpha1.PowerCheckNever}
	for _, c := range p.Spec.Detection.UnhealthyConditions {
		r.Conditions = append(r.Conditions, detect.ConditionRule{Type: v1.NodeConditionType(c.Type), Status: v1.ConditionStatus(c.Status), Duration: c.Duration.Duration})
	}
	return r
}

// GuardPolicy turns the policy's stormGuard into stormguard values: the
// policy, and the rate of its token bucket.
func GuardPolicy(p *fencingv1alpha1.FencePolicy) (stormguard.Policy, float64, int) {
	sg := p.Spec.StormGuard
	maxUnhealthy := sg.MaxUnhealthy
	if maxUnhealthy == nil {
		v := intstr.FromString(defaultMaxUnhealthy)
		maxUnhealthy = &v
	}
	zoneLabel := sg.ZoneLabel
	if zoneLabel == "" {
		zoneLabel = defaultZoneLabel
	}
	pol := stormguard.Policy{
		MaxConcurrentFencing: orDefault(int(sg.MaxConcurrentFencing), defaultMaxConcurrent),
		MaxUnhealthy:         maxUnhealthy,
		Zones: stormguard.ZoneRules{
			ZoneLabel:              zoneLabel,
			UnhealthyZoneThreshold: quantity(sg.UnhealthyZoneThreshold, defaultZoneThreshold),
			LargeClusterSize:       orDefault(int(sg.LargeClusterSize), defaultLargeCluster),
			PartialDisruptionRate:  quantity(sg.PartialDisruptionRate, defaultPartialRate),
		},
		FullDisruption: stormguard.FullDisruptionStop,
		Cooldown:       duration(sg.Cooldown, defaultCooldown),
		MaxAttempts:    MaxAttempts(p),
	}
	return pol, quantity(sg.Rate.QPS, defaultRateQPS), orDefault(int(sg.Rate.Burst), defaultRateBurst)
}

// MaxAttempts is fencingreq.MaxAttempts, the limit the fence agent
// stops at too.
func MaxAttempts(p *fencingv1alpha1.FencePolicy) int { return fencingreq.MaxAttempts(p) }

// HealthyDelay is how long a returned node must be Ready before it is
// unfenced.
func HealthyDelay(p *fencingv1alpha1.FencePolicy) time.Duration {
	return duration(p.Spec.Recovery.HealthyDelay, defaultHealthyDelay)
}

// AppliesOutOfService reports whether the policy has Fenceline add the
// out-of-service taint once a node is fenced (the default).
func AppliesOutOfService(p *fencingv1alpha1.FencePolicy) bool {
	return p.Spec.Recovery.OutOfServiceTaint != "None"
}

// UnfencesOnNewBoot reports whether the policy unfences a node that returns
// with a new boot ID (the default) rather than leaving it to a human.
func UnfencesOnNewBoot(p *fencingv1alpha1.FencePolicy) bool {
	return p.Spec.Recovery.Unfence != "Manual"
}

// AutomaticApproval reports whether the policy fences without a human's
// approval (the default).
func AutomaticApproval(p *fencingv1alpha1.FencePolicy) bool {
	return p.Spec.Detection.Approval != fencingv1alpha1.ApprovalManual
}

func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func quantity(q *resource.Quantity, def float64) float64 {
	if q == nil {
		return def
	}
	return q.AsApproximateFloat64()
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
