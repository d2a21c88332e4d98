package nodefencing

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// Builders of the fencing API objects for this package's tests, in the
// option dialect of internal/testobj:
//
//	p := policy("workers", selecting("role", "worker"), manualApproval())
//	r := request("n1", inPhase(fencingv1alpha1.FencingPhaseFencing), bootAtFence("boot-1"))

// policyOption changes a FencePolicy under construction.
type policyOption func(*fencingv1alpha1.FencePolicy)

// policy returns a FencePolicy that selects every node (no nodeSelector)
// with one level of the FenceClass "bmc", every other field unset (the
// defaults apply).
func policy(name string, opts ...policyOption) *fencingv1alpha1.FencePolicy {
	p := &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-policy-" + name)},
		Spec:       fencingv1alpha1.FencePolicySpec{Levels: []fencingv1alpha1.FenceLevel{level(1, "bmc")}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// level is a FenceLevel of the classes.
func level(index int32, classes ...string) fencingv1alpha1.FenceLevel {
	return fencingv1alpha1.FenceLevel{Index: index, FenceClassNames: classes}
}

// levels replaces the policy's levels.
func levels(ls ...fencingv1alpha1.FenceLevel) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Levels = ls }
}

// selecting sets a nodeSelector matching the label.
func selecting(k, v string) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}

// selector sets the nodeSelector as given.
func selector(s *metav1.LabelSelector) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.NodeSelector = s }
}

// manualApproval sets detection.approval Manual.
func manualApproval() policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Detection.Approval = fencingv1alpha1.ApprovalManual }
}

// storage sets storageFence.
func storage(m fencingv1alpha1.StorageFenceMode) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StorageFence = m }
}

// maxConcurrent sets stormGuard.maxConcurrentFencing.
func maxConcurrent(n int32) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxConcurrentFencing = n }
}

// maxUnhealthy sets stormGuard.maxUnhealthy.
func maxUnhealthy(v intstr.IntOrString) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxUnhealthy = &v }
}

// maxAttempts sets stormGuard.maxAttempts.
func maxAttempts(n int32) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.StormGuard.MaxAttempts = n }
}

// healthyDelay sets recovery.healthyDelay.
func healthyDelay(d time.Duration) policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.HealthyDelay = &metav1.Duration{Duration: d} }
}

// noOutOfService sets recovery.outOfServiceTaint None.
func noOutOfService() policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.OutOfServiceTaint = "None" }
}

// manualUnfence sets recovery.unfence Manual.
func manualUnfence() policyOption {
	return func(p *fencingv1alpha1.FencePolicy) { p.Spec.Recovery.Unfence = "Manual" }
}

// class returns a Redfish FenceClass that verifies the power state.
func class(name string, sharesPowerWithNode bool) *fencingv1alpha1.FenceClass {
	return &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-class-" + name)},
		Spec: fencingv1alpha1.FenceClassSpec{
			Method: fencingv1alpha1.FenceMethodRedfish, Verify: fencingv1alpha1.VerifyPowerState,
			SharesPowerWithNode: sharesPowerWithNode,
		},
	}
}

// classes indexes FenceClasses by name, as PolicyProblem takes them.
func classes(cs ...*fencingv1alpha1.FenceClass) map[string]*fencingv1alpha1.FenceClass {
	out := map[string]*fencingv1alpha1.FenceClass{}
	for _, c := range cs {
		out[c.Name] = c
	}
	return out
}

// requestOption changes a FencingRequest under construction.
type requestOption func(*fencingv1alpha1.FencingRequest)

// request returns an automatic request (requester controller) of the node
// built by testobj.Node: its UID, policy "p", reason LeaseExpired, phase
// Pending, created at testobj.Epoch.
func request(node string, opts ...requestOption) *fencingv1alpha1.FencingRequest {
	r := &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: node + "-req", UID: types.UID("uid-req-" + node),
			CreationTimestamp: metav1.NewTime(testobj.Epoch),
		},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: node, NodeUID: types.UID("uid-" + node), PolicyName: "p",
			Reason: "LeaseExpired", Requester: RequesterController, Action: fencingv1alpha1.FenceActionOff,
		},
		Status: fencingv1alpha1.FencingRequestStatus{Phase: fencingv1alpha1.FencingPhasePending},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// inPhase sets status.phase.
func inPhase(p fencingv1alpha1.FencingPhase) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.Phase = p }
}

// byUser makes the request a human's (manual) request.
func byUser(name string) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Spec.Requester = "user:" + name
		r.Spec.Reason = "Manual"
	}
}

// approval sets spec.approved.
func approval(b bool) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Spec.Approved = &b }
}

// forNodeUID sets spec.nodeUID ("" for a request that names no UID).
func forNodeUID(uid types.UID) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Spec.NodeUID = uid }
}

// bootAtFence sets status.bootIDAtFence.
func bootAtFence(id string) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.BootIDAtFence = id }
}

// failedRounds sets status.failedRounds.
func failedRounds(n int32) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.FailedRounds = n }
}

// attempts sets status.attempts.
func attempts(as ...fencingv1alpha1.FenceAttempt) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Status.Attempts = as }
}

// attempt is a finished fence attempt as the fence agent records it.
func attempt(level int32, class string, result fencingv1alpha1.FenceAttemptResult, power fencingv1alpha1.PowerState) fencingv1alpha1.FenceAttempt {
	end := metav1.NewTime(testobj.Epoch)
	return fencingv1alpha1.FenceAttempt{
		Level: level, FenceClass: class, Method: string(fencingv1alpha1.FenceMethodRedfish),
		StartTime: metav1.NewTime(testobj.Epoch), EndTime: &end, Result: result, VerifiedPowerState: string(power),
	}
}

// nodeUID sets the Node's UID, as a Node recreated under the same name has
// another one.
func nodeUID(uid types.UID) testobj.NodeOption {
	return func(n *v1.Node) { n.UID = uid }
}

// asked puts an operator's unfence ask on the request, verified ("Off",
// "Rebooted") or not ("").
func asked(who, verified string) requestOption {
	return func(r *fencingv1alpha1.FencingRequest) { r.Annotations = askAnnotations(r.Annotations, who, verified) }
}

// overridden puts the exclusion override on the request.
func overridden() requestOption {
	return func(r *fencingv1alpha1.FencingRequest) {
		r.Annotations = mergeAnnotations(r.Annotations, map[string]string{names.OverrideExclusionAnnotation: "user:ada"})
	}
}

// nodeAsked puts an operator's unfence ask on the node.
func nodeAsked(who, verified string) testobj.NodeOption {
	return func(n *v1.Node) { n.Annotations = askAnnotations(n.Annotations, who, verified) }
}

func askAnnotations(a map[string]string, who, verified string) map[string]string {
	add := map[string]string{names.UnfenceAnnotation: who}
	if verified != "" {
		add[names.UnfenceVerifiedAnnotation] = verified
	}
	return mergeAnnotations(a, add)
}

func mergeAnnotations(a, add map[string]string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range add {
		a[k] = v
	}
	return a
}

// failedMarks are the marks a request that Failed leaves on its node:
// both fencing taints, FencingTriaged and FencingRequired True.
func failedMarks(since time.Time) testobj.NodeOption {
	return func(n *v1.Node) {
		for _, o := range []testobj.NodeOption{
			testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, since),
			testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, since),
			testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, since),
			testobj.ConditionSince(names.FencingRequiredCondition, v1.ConditionTrue, since),
		} {
			o(n)
		}
	}
}
