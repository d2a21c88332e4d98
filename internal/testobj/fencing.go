package testobj

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/names"
)

// The fencing API objects, in the same dialect:
//
//	p := testobj.FencePolicy("workers", testobj.Selecting("role", "worker"), testobj.ManualApproval())
//	r := testobj.FencingRequest("n1", testobj.InPhase(fencingv1alpha1.FencingPhaseFencing), testobj.BootIDAtFence("boot-1"))

// PolicyOption changes a FencePolicy under construction.
type PolicyOption func(*fencingv1alpha1.FencePolicy)

// FencePolicy returns a FencePolicy that selects every node (no
// nodeSelector) with one level of the FenceClass "bmc", every other field
// unset (the defaults apply).
func FencePolicy(name string, opts ...PolicyOption) *fencingv1alpha1.FencePolicy {
	p := &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-policy-" + name)},
		Spec:       fencingv1alpha1.FencePolicySpec{Levels: []fencingv1alpha1.FenceLevel{FenceLevel(1, "bmc")}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// FenceLevel is a level of a policy: the FenceClasses it fences with.
func FenceLevel(index int32, classes ...string) fencingv1alpha1.FenceLevel {
	return fencingv1alpha1.FenceLevel{Index: index, FenceClassNames: classes}
}

// Levels replaces the policy's levels.
func Levels(ls ...fencingv1alpha1.FenceLevel) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Levels = ls }
}

// Selecting sets a nodeSelector matching the label.
func Selecting(k, v string) PolicyOption {
	return NodeSelector(&metav1.LabelSelector{MatchLabels: map[string]string{k: v}})
}

// NodeSelector sets the nodeSelector as given (nil selects every node).
func NodeSelector(s *metav1.LabelSelector) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.NodeSelector = s }
}

// ManualApproval sets detection.approval Manual.
func ManualApproval() PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Detection.Approval = fencingv1alpha1.ApprovalManual }
}

// StorageFence sets storageFence.
func StorageFence(m fencingv1alpha1.StorageFenceMode) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StorageFence = m }
}

// MaxConcurrentFencing sets stormGuard.maxConcurrentFencing.
func MaxConcurrentFencing(n int32) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxConcurrentFencing = n }
}

// MaxUnhealthy sets stormGuard.maxUnhealthy.
func MaxUnhealthy(v intstr.IntOrString) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxUnhealthy = &v }
}

// MaxAttempts sets stormGuard.maxAttempts.
func MaxAttempts(n int32) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxAttempts = n }
}

// HealthyDelay sets recovery.healthyDelay.
func HealthyDelay(d time.Duration) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.HealthyDelay = &metav1.Duration{Duration: d} }
}

// NoOutOfServiceTaint sets recovery.outOfServiceTaint None.
func NoOutOfServiceTaint() PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.OutOfServiceTaint = "None" }
}

// Paused sets spec.paused.
func Paused() PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Paused = true }
}

// PowerCheck sets detection.powerCheck.
func PowerCheck(m fencingv1alpha1.PowerCheckMode) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Detection.PowerCheck = m }
}

// ManualUnfence sets recovery.unfence Manual.
func ManualUnfence() PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.Unfence = "Manual" }
}

// ClassOption changes a FenceClass under construction.
type ClassOption func(*fencingv1alpha1.FenceClass)

// FenceClass returns a Redfish FenceClass that verifies the power state.
func FenceClass(name string, opts ...ClassOption) *fencingv1alpha1.FenceClass {
	c := &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-class-" + name)},
		Spec:       fencingv1alpha1.FenceClassSpec{Method: fencingv1alpha1.FenceMethodRedfish, Verify: fencingv1alpha1.VerifyPowerState},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Method sets the class's fence method.
func Method(m fencingv1alpha1.FenceMethod) ClassOption {
	return func(c *fencingv1alpha1.FenceClass) { c.Spec.Method = m }
}

// Credentials sets credentialsSecretRef, the Secret the fence agent reads
// the device's credentials from.
func Credentials(namespace, name string) ClassOption {
	return func(c *fencingv1alpha1.FenceClass) {
		c.Spec.CredentialsSecretRef = &fencingv1alpha1.SecretReference{Namespace: namespace, Name: name}
	}
}

// InsecureTLS sets redfish.insecureTLS, as a test's simulated BMC serves a
// self-signed certificate.
func InsecureTLS() ClassOption {
	return func(c *fencingv1alpha1.FenceClass) {
		c.Spec.Redfish = &fencingv1alpha1.RedfishSettings{InsecureTLS: true}
	}
}

// SharesPowerWithNode marks the class's device as powered with the node
// (a BMC that dies with it).
func SharesPowerWithNode() ClassOption {
	return func(c *fencingv1alpha1.FenceClass) { c.Spec.SharesPowerWithNode = true }
}

// TargetOption changes a FenceTarget under construction.
type TargetOption func(*fencingv1alpha1.FenceTarget)

// FenceTarget returns the node's FenceTarget with one endpoint of the
// FenceClass "bmc" (FencePolicy's default level) at a Redfish address.
func FenceTarget(node string, opts ...TargetOption) *fencingv1alpha1.FenceTarget {
	t := &fencingv1alpha1.FenceTarget{
		ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID("uid-target-" + node)},
		Spec: fencingv1alpha1.FenceTargetSpec{Endpoints: []fencingv1alpha1.FenceEndpoint{
			{FenceClassName: "bmc", Address: "https://bmc-" + node + ".example"},
		}},
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Endpoints replaces the target's endpoints.
func Endpoints(eps ...fencingv1alpha1.FenceEndpoint) TargetOption {
	return func(t *fencingv1alpha1.FenceTarget) { t.Spec.Endpoints = eps }
}

// Probed sets the status the fence agent's probe writes: the power state
// read at t, and whether every endpoint was reached.
func Probed(power fencingv1alpha1.PowerState, reachable bool, t time.Time) TargetOption {
	return func(ft *fencingv1alpha1.FenceTarget) {
		status := metav1.ConditionFalse
		if reachable {
			status = metav1.ConditionTrue
		}
		at := metav1.NewTime(t)
		ft.Status.PowerState, ft.Status.LastProbeTime = power, &at
		ft.Status.Conditions = []metav1.Condition{{Type: fencingv1alpha1.FenceTargetReachable, Status: status, Reason: "Probed", LastTransitionTime: at}}
	}
}

// ProbeFailed sets the status of a probe that failed at t for reason (a
// FenceTarget's Reachable condition False with that reason and message).
func ProbeFailed(reason, message string, t time.Time) TargetOption {
	return func(ft *fencingv1alpha1.FenceTarget) {
		at := metav1.NewTime(t)
		ft.Status.PowerState, ft.Status.LastProbeTime = fencingv1alpha1.PowerStateUnknown, &at
		ft.Status.Conditions = []metav1.Condition{{Type: fencingv1alpha1.FenceTargetReachable, Status: metav1.ConditionFalse, Reason: reason, Message: message, LastTransitionTime: at}}
	}
}

// PowerCheckAsked sets the power-check ask on the target
// (names.PowerCheckAnnotation) to token.
func PowerCheckAsked(token string) TargetOption {
	return func(ft *fencingv1alpha1.FenceTarget) {
		if ft.Annotations == nil {
			ft.Annotations = map[string]string{}
		}
		ft.Annotations[names.PowerCheckAnnotation] = token
	}
}

// PowerCheckAnswered sets the fence agent's answer to the power check
// token: the state it read.
func PowerCheckAnswered(token string, power fencingv1alpha1.PowerState) TargetOption {
	return func(ft *fencingv1alpha1.FenceTarget) {
		ft.Status.PowerCheck = &fencingv1alpha1.FencePowerCheck{Token: token, PowerState: power}
	}
}

// TargetGeneration sets the target's metadata.generation (a spec the fence
// agent may not have probed yet).
func TargetGeneration(g int64) TargetOption {
	return func(ft *fencingv1alpha1.FenceTarget) { ft.Generation = g }
}

// RequestOption changes a FencingRequest under construction.
type RequestOption func(*fencingv1alpha1.FencingRequest)

// FencingRequest returns an automatic request of the node built by Node
// (its UID): requester "controller" (node-fencing's), policy "p", reason
// LeaseExpired, action Off, phase Pending, created at Epoch.
func FencingRequest(node string, opts ...RequestOption) *fencingv1alpha1.FencingRequest {
	r := &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: node + "-req", UID: types.UID("uid-req-" + node),
			CreationTimestamp: metav1.NewTime(Epoch),
		},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: node, NodeUID: types.UID("uid-" + node), PolicyName: "p",
			Reason: "LeaseExpired", Requester: "controller", Action: fencingv1alpha1.FenceActionOff,
		},
		Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.FencingPhasePending},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// RequestName sets the request's name (FencingRequest names it
// "<node>-req").
func RequestName(name string) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Name = name }
}

// ForPolicy sets spec.policyName.
func ForPolicy(name string) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Spec.PolicyName = name }
}

// RequestCondition sets a status condition, replacing one of the same type
// (e.g. Required=True, as node-fencing admits the request).
func RequestCondition(c metav1.Condition) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Status.Conditions = slices.DeleteFunc(r.Status.Conditions, func(o metav1.Condition) bool { return o.Type == c.Type })
		r.Status.Conditions = append(r.Status.Conditions, c)
	}
}

// InPhase sets status.phase.
func InPhase(p fencingv1alpha1.FencingPhase) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = p }
}

// ByUser makes the request a human's (manual) request.
func ByUser(name string) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Spec.Requester = "user:" + name
		r.Spec.Reason = "Manual"
	}
}

// Approved sets spec.approved.
func Approved(b bool) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Spec.Approved = &b }
}

// ForNodeUID sets spec.nodeUID ("" for a request that names no UID).
func ForNodeUID(uid types.UID) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Spec.NodeUID = uid }
}

// BootIDAtFence sets status.bootIDAtFence.
func BootIDAtFence(id string) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.BootIDAtFence = id }
}

// FailedRounds sets status.failedRounds.
func FailedRounds(n int32) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.FailedRounds = n }
}

// Attempts sets status.attempts.
func Attempts(as ...fencingv1alpha1.FenceAttempt) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.Attempts = as }
}

// FenceAttempt is a finished Redfish fence attempt as the fence agent
// records it, at Epoch.
func FenceAttempt(level int32, class string, result fencingv1alpha1.FenceAttemptResult, power fencingv1alpha1.PowerState) fencingv1alpha1.FenceAttempt {
	end := metav1.NewTime(Epoch)
	return fencingv1alpha1.FenceAttempt{
		Level: level, FenceClass: class, Method: string(fencingv1alpha1.FenceMethodRedfish),
		StartTime: metav1.NewTime(Epoch), EndTime: &end, Result: result, VerifiedPowerState: string(power),
	}
}

// UnfenceAsked puts an operator's unfence ask on the request, verified
// ("Off", "Rebooted") or not ("").
func UnfenceAsked(who, verified string) RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Annotations = merged(r.Annotations, UnfenceAsk(who, verified))
	}
}

// ExclusionOverridden puts the exclusion override on the request.
func ExclusionOverridden() RequestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Annotations = merged(r.Annotations, map[string]string{names.OverrideExclusionAnnotation: "user:ada"})
	}
}

// UnfenceAsk is the annotations of an operator's unfence ask, as kubectl
// fenceline unfence writes them.
func UnfenceAsk(who, verified string) map[string]string {
	a := map[string]string{names.UnfenceAnnotation: who}
	if verified != "" {
		a[names.UnfenceVerifiedAnnotation] = verified
	}
	return a
}

// NodeUID sets the Node's UID, as a Node recreated under the same name has
// another one.
func NodeUID(uid types.UID) NodeOption {
	return func(n *v1.Node) { n.UID = uid }
}

// NodeUnfenceAsked puts an operator's unfence ask on the node.
func NodeUnfenceAsked(who, verified string) NodeOption {
	return func(n *v1.Node) { n.Annotations = merged(n.Annotations, UnfenceAsk(who, verified)) }
}

// FailedFenceMarks are the marks a FencingRequest that Failed leaves on
// its node since t: both fencing taints, FencingTriaged and FencingRequired
// True.
func FailedFenceMarks(t time.Time) NodeOption {
	return func(n *v1.Node) {
		for _, o := range []NodeOption{
			TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, t),
			TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, t),
			ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, t),
			ConditionSince(names.FencingRequiredCondition, v1.ConditionTrue, t),
		} {
			o(n)
		}
	}
}

// merged adds add to the annotations a (nil makes a new map).
func merged(a, add map[string]string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range add {
		a[k] = v
	}
	return a
}

// NetworkFences adds a storage fence method NetworkFence per class.
func NetworkFences(classes ...string) PolicyOption {
	return func(p *fencingv1alpha1.FencePolicy) {
		for _, c := range classes {
			p.Spec.StorageFenceMethods = append(p.Spec.StorageFenceMethods, fencingv1alpha1.StorageFenceMethod{
				Method: fencingv1alpha1.StorageFenceNetworkFence, NetworkFence: &fencingv1alpha1.NetworkFenceMethod{NetworkFenceClassName: c},
			})
		}
	}
}
