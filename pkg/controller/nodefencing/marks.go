package nodefencing

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// What an operator may state, in names.UnfenceVerifiedAnnotation, that
// they verified of the machine since its fence began.
const (
	VerifiedOff      = "Off"
	VerifiedRebooted = "Rebooted"
)

// Marks are what node-fencing leaves on a Node for a request: its fencing
// taints, the fencing conditions set True, and the owner annotation of the
// out-of-service taint it added.
type Marks struct {
	// Taints are the keys of Fenceline's fencing taints on the node.
	Taints []string
	// Conditions are the fencing condition types that are True.
	Conditions []string
	// OutOfService: the owner annotation is there, so Fenceline added the
	// node's out-of-service taint (if it is still there).
	OutOfService bool
}

// MarksOf reads the node's marks; a nil node has none.
func MarksOf(n *v1.Node) Marks {
	var m Marks
	if n == nil {
		return m
	}
	for _, t := range n.Spec.Taints {
		if (t.Key == triagedTaint.Key || t.Key == requiredTaint.Key) && !slices.Contains(m.Taints, t.Key) {
			m.Taints = append(m.Taints, t.Key)
		}
	}
	for _, typ := range []string{names.FencingTriagedCondition, names.FencingRequiredCondition, names.FencingCompleteCondition} {
		if c := nodeutil.Condition(n, typ); c != nil && c.Status == v1.ConditionTrue {
			m.Conditions = append(m.Conditions, typ)
		}
	}
	_, m.OutOfService = n.Annotations[ownerAnnotation]
	return m
}

// Any reports whether the node carries any mark.
func (m Marks) Any() bool { return len(m.Taints) > 0 || len(m.Conditions) > 0 || m.OutOfService }

// CutOff reports whether the marks cut the node off from storage
// (FencingComplete=True, or Fenceline's out-of-service taint): removing
// them changes how the node's volumes are detached.
func (m Marks) CutOff() bool {
	return m.OutOfService || slices.Contains(m.Conditions, names.FencingCompleteCondition)
}

// String lists the marks for messages.
func (m Marks) String() string {
	var parts []string
	parts = append(parts, m.Taints...)
	for _, c := range m.Conditions {
		parts = append(parts, c+"=True")
	}
	if m.OutOfService {
		parts = append(parts, names.OutOfServiceTaint+" (Fenceline's)")
	}
	return strings.Join(parts, ", ")
}

// LeftMarks reports whether the input's node carries marks that no open
// request holds: a request Failed (or was deleted) and left them. Such a
// node stays unschedulable until the marks are cleared, and the controller
// keeps saying so (metric, alert, conditions).
func LeftMarks(in Input) bool {
	return in.Request == nil && MarksOf(in.Node).Any()
}

// UnfenceAsk is an operator's ask to unfence (kubectl fenceline unfence),
// read from names.UnfenceAnnotation and names.UnfenceVerifiedAnnotation.
type UnfenceAsk struct {
	// Requester is who asks; "" when there is no ask.
	Requester string
	// Verified is VerifiedOff, VerifiedRebooted, or "" (nothing stated, or
	// a value that is neither).
	Verified string
}

// AskOf reads the ask from an object's annotations.
func AskOf(annotations map[string]string) UnfenceAsk {
	who, ok := annotations[names.UnfenceAnnotation]
	if !ok {
		return UnfenceAsk{}
	}
	if who == "" {
		who = "someone"
	}
	ask := UnfenceAsk{Requester: who}
	if v := annotations[names.UnfenceVerifiedAnnotation]; v == VerifiedOff || v == VerifiedRebooted {
		ask.Verified = v
	}
	return ask
}

// Asked reports whether there is an ask.
func (a UnfenceAsk) Asked() bool { return a.Requester != "" }

func (a UnfenceAsk) String() string {
	if a.Verified == "" {
		return a.Requester + " asked to unfence"
	}
	return fmt.Sprintf("%s asked to unfence, verified %s", a.Requester, a.Verified)
}

// overridesExclusion reports whether the request may fence a node
// labelled detect.ExcludeLabel: a human said so on it.
func overridesExclusion(r *fencingv1alpha1.FencingRequest) bool {
	_, ok := r.Annotations[names.OverrideExclusionAnnotation]
	return ok
}

func excluded(n *v1.Node) bool {
	if n == nil {
		return false
	}
	_, ok := n.Labels[detect.ExcludeLabel]
	return ok
}

// rebooted is the one rule that says whether the machine is known to have
// stopped since its fence began, so that what its old boot held is gone:
//   - both boot IDs known and different: yes (NewBootID);
//   - both known and equal: no (SameBootID), whatever an operator states:
//     a machine that was off or rebooted comes back with a new boot ID;
//   - either unknown: only the operator's verified ask proves it
//     (VerifiedByOperator), else no (BootIDUnknown).
func rebooted(atFence, now string, ask UnfenceAsk) (ok bool, reason, why string) {
	switch {
	case atFence != "" && now != "" && atFence != now:
		return true, "NewBootID", fmt.Sprintf("the node is back with a new boot ID (%s, was %s)", now, atFence)
	case atFence != "" && now == atFence:
		return false, ReasonSameBootID, fmt.Sprintf("the node is Ready with the boot ID it had when the fence began (%s): nothing proves it stopped; reboot it and it is cleared on its new boot ID", now)
	case ask.Verified != "":
		return true, ReasonVerifiedByOperator, fmt.Sprintf("no boot ID to compare, and %s", ask)
	}
	return false, ReasonUnknownBootID, "the boot ID when the fence began or now is unknown, so a reboot cannot be proven: once you have verified the machine was off or rebooted, run kubectl fenceline unfence NODE --verified=rebooted"
}

// readyLeft is how long the node must still be Ready before the healthy
// delay has passed; zero when it has.
func readyLeft(node *v1.Node, delay time.Duration, now time.Time) time.Duration {
	ready := nodeutil.ReadyCondition(node)
	if ready == nil {
		return 0
	}
	return max(0, ready.LastTransitionTime.Add(delay).Sub(now))
}

// decideClear: no open request, and the node carries marks a Failed or a
// deleted request left. They are removed only when the node is Ready and
// not a fencing candidate for the healthy delay, the machine is known to
// have stopped since the fence began (rebooted: a new boot ID, or an
// operator's verified ask where no boot ID can tell), and, for marks that
// cut it off from storage, no VolumeAttachment and no volume in use is
// left. Until then the node stays unschedulable and the decision says why.
func decideClear(in Input, v detect.Verdict) Decision {
	node, marks := in.Node, MarksOf(in.Node)
	ask, atFence, whose := AskOf(in.Node.Annotations), "", "a deleted request"
	if in.Failed != nil {
		ask, atFence, whose = AskOf(in.Failed.Annotations), in.Failed.Status.BootIDAtFence, "FencingRequest "+in.Failed.Name
	}
	wait := func(reason, why string) Decision {
		return Decision{Reason: reason, Why: fmt.Sprintf("%s left %s on the node; %s", whose, marks, why), Clearing: true}
	}
	switch {
	case !nodeutil.IsReady(node):
		return wait(ReasonNodeDown, "they stay while the node is not Ready")
	case v.Candidate:
		return wait(ReasonNotCandidate, "the node is a fencing candidate: "+v.Message)
	}
	delay := defaultHealthyDelay
	if in.Policy != nil {
		delay = HealthyDelay(in.Policy)
	}
	if left := readyLeft(node, delay, in.Now); left > 0 {
		d := wait(ReasonHealthyDelay, fmt.Sprintf("the node must be Ready for %s; %s left", delay, left.Round(time.Millisecond)))
		d.RecheckAfter = left
		return d
	}
	ok, reason, why := rebooted(atFence, node.Status.NodeInfo.BootID, ask)
	if !ok {
		return wait(reason, why)
	}
	if marks.CutOff() {
		switch {
		case in.VolumeAttachments > 0:
			return wait(ReasonAttachmentsRemain, fmt.Sprintf("%d VolumeAttachments are left for the node", in.VolumeAttachments))
		case len(node.Status.VolumesInUse) > 0:
			return wait(ReasonVolumesInUse, fmt.Sprintf("the node reports %d volumes in use: its storage clean-up has not run", len(node.Status.VolumesInUse)))
		}
	}
	return Decision{Step: StepClear, Reason: "Unfenced", Clearing: true,
		Why: fmt.Sprintf("%s left %s on the node; %s, and it is Ready: they are removed", whose, marks, why)}
}

// failedRequest is the node's newest Failed request whose marks were not
// cleared (no Recovered=True condition), bound to the node as it is now.
func failedRequest(reqs []*fencingv1alpha1.FencingRequest, node *v1.Node) *fencingv1alpha1.FencingRequest {
	var newest *fencingv1alpha1.FencingRequest
	for _, r := range reqs {
		if r.Status.Phase != fencingv1alpha1.FencingPhaseFailed || cleared(r) {
			continue
		}
		if node != nil && r.Spec.NodeUID != "" && r.Spec.NodeUID != node.UID {
			continue
		}
		if newest == nil || !r.CreationTimestamp.Before(&newest.CreationTimestamp) {
			newest = r
		}
	}
	return newest
}

// cleared reports whether node-fencing cleared the marks the Failed
// request left (its Recovered condition is True).
func cleared(r *fencingv1alpha1.FencingRequest) bool {
	return meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.FencingRequestRecovered)
}

// StripMarks removes from n every mark node-fencing leaves (its fencing
// taints; the out-of-service taint and the owner annotation, when the
// annotation is there) and the operator's ask on the node. It reports
// whether n changed. Only a node with no open request is stripped so: its
// owner annotation can name no live request.
func StripMarks(n *v1.Node) bool {
	_, owned := n.Annotations[ownerAnnotation]
	kept := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key == triagedTaint.Key || t.Key == requiredTaint.Key || (owned && t.Key == outOfServiceTaint.Key) {
			continue
		}
		kept = append(kept, t)
	}
	changed := len(kept) != len(n.Spec.Taints)
	n.Spec.Taints = kept
	for _, k := range []string{ownerAnnotation, names.UnfenceAnnotation, names.UnfenceVerifiedAnnotation} {
		if _, ok := n.Annotations[k]; ok {
			delete(n.Annotations, k)
			changed = true
		}
	}
	return changed
}
