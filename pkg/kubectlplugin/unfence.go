package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/names"
)

// UnfenceOptions is a manual unfence.
type UnfenceOptions struct {
	Node      string
	Requester string
	// Verified is what the operator verified of the machine since its
	// fence began: nodefencing.VerifiedOff, nodefencing.VerifiedRebooted,
	// or "" for nothing.
	Verified string
	Confirm  Confirm
	Now      time.Time
}

// ParseVerified turns --verified (off, rebooted, any case) into the value
// of names.UnfenceVerifiedAnnotation; "" stays "".
func ParseVerified(s string) (string, error) {
	switch strings.ToLower(s) {
	case "":
		return "", nil
	case "off":
		return nodefencing.VerifiedOff, nil
	case "rebooted":
		return nodefencing.VerifiedRebooted, nil
	}
	return "", fmt.Errorf("--verified must be off or rebooted, not %q", s)
}

// Unfence asks node-fencing to undo what it did to the node, and writes
// nothing but the ask (names.UnfenceAnnotation), after checking with
// nodefencing.Decide that the ask can be carried out:
//
//   - an open request not admitted yet (Pending, Triaged): the ask on it
//     cancels it;
//   - Fencing: refused, a fence in progress is never stopped;
//   - Fenced or Recovering: the ask on it unfences where the policy
//     unfences by hand, or stands in for a boot ID that is unknown (with
//     Verified); otherwise node-fencing unfences by itself, or says why not;
//   - no open request, but the marks of a Failed or deleted request on the
//     node: the ask (on the Failed request, else on the Node) has them
//     removed once the node is back Ready and a reboot is shown (a new boot
//     ID, or Verified where none can tell);
//   - nothing of Fenceline's on the node: refused, nothing to unfence.
//
// It returns the ask, to wait on.
func Unfence(ctx context.Context, c Clients, o UnfenceOptions) (*Ask, error) {
	st, err := readFenceState(ctx, c, o.Node, o.Now)
	if err != nil {
		return nil, err
	}
	r := st.input.Request
	if r == nil {
		return askClear(ctx, c, o, st)
	}
	switch phaseOf(r) {
	case fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged:
		return askCancel(ctx, c, o, r)
	case fencingv1alpha1.FencingPhaseFencing:
		return nil, fmt.Errorf("FencingRequest %s is Fencing: a fence in progress is never stopped (the node may have written while it looked dead); wait for Fenced or Failed", r.Name)
	}
	return askUnfence(ctx, c, o, st)
}

// askCancel asks node-fencing to cancel a request not admitted yet.
func askCancel(ctx context.Context, c Clients, o UnfenceOptions, r *fencingv1alpha1.FencingRequest) (*Ask, error) {
	prompt := fmt.Sprintf("Ask node-fencing to cancel FencingRequest %s (%s, not admitted yet) of node %s?", r.Name, phaseOf(r), o.Node)
	if r.Spec.Requester == nodefencing.RequesterController {
		prompt += " node-fencing makes a new request while the node stays unhealthy."
	}
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return nil, errors.Join(ErrAborted, err)
	}
	if err := patchRequestAsk(ctx, c, r, o); err != nil {
		return nil, err
	}
	return &Ask{
		Node: o.Node, Object: "fencingrequest/" + r.Name,
		Asked: fmt.Sprintf("fencingrequest.fenceline.io/%s annotated %s=%s: node-fencing cancels it and clears node %s's triage", r.Name, names.UnfenceAnnotation, o.Requester, o.Node),
		Doing: "cancel FencingRequest " + r.Name, Watch: "kubectl get fencingrequest " + r.Name + " -w",
		done: func(st *fenceState) (bool, error) {
			cur := requestByUID(st, r)
			switch {
			case cur == nil || cur.Status.Phase == fencingv1alpha1.FencingPhaseCancelled:
				return true, nil
			case cur.Status.Phase != "" && cur.Status.Phase != fencingv1alpha1.FencingPhasePending && cur.Status.Phase != fencingv1alpha1.FencingPhaseTriaged:
				return false, fmt.Errorf("FencingRequest %s was admitted before node-fencing saw the ask (phase %s): a fence in progress is never stopped", r.Name, cur.Status.Phase)
			}
			return false, nil
		},
	}, nil
}

// askUnfence asks node-fencing to unfence a Fenced or Recovering node,
// where an ask changes its decision.
func askUnfence(ctx context.Context, c Clients, o UnfenceOptions, st *fenceState) (*Ask, error) {
	r, in := st.input.Request, st.input
	without := nodefencing.Decide(in)
	bootUnknown := r.Status.BootIDAtFence == "" || st.node.Status.NodeInfo.BootID == ""
	matters := in.Policy != nil && (!nodefencing.UnfencesOnNewBoot(in.Policy) || (bootUnknown && o.Verified != ""))
	if !matters {
		if without.Step == nodefencing.StepRecovering || without.Step == nodefencing.StepRecover || without.Step == nodefencing.StepNetworkUnfence {
			return nil, fmt.Errorf("node-fencing unfences node %s by itself (%s): %s", o.Node, without.Step, without.Why)
		}
		return nil, fmt.Errorf("node %s cannot be unfenced now (FencingRequest %s, %s): %s", o.Node, r.Name, joinNonEmpty(" ", string(phaseOf(r)), bracket(without.Reason)), without.Why)
	}
	in.Request = withAsk(r, o)
	d := nodefencing.Decide(in)
	if refused(d) {
		return nil, fmt.Errorf("node %s cannot be unfenced (FencingRequest %s, %s): %s", o.Node, r.Name, joinNonEmpty(" ", string(phaseOf(r)), bracket(d.Reason)), d.Why)
	}
	prompt := fmt.Sprintf("Ask node-fencing to unfence node %s: set its fencing conditions False and remove Fenceline's taints (and the out-of-service taint FencingRequest %s added) once it is back and nothing of its old boot holds a volume?%s",
		o.Node, r.Name, verifiedClause(o.Verified))
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return nil, errors.Join(ErrAborted, err)
	}
	if err := patchRequestAsk(ctx, c, r, o); err != nil {
		return nil, err
	}
	return &Ask{
		Node: o.Node, Object: "fencingrequest/" + r.Name,
		Asked: fmt.Sprintf("fencingrequest.fenceline.io/%s annotated %s=%s: node-fencing unfences node %s (%s)", r.Name, names.UnfenceAnnotation, o.Requester, o.Node, decisionText(d)),
		Doing: "unfence node " + o.Node, Watch: "kubectl get fencingrequest " + r.Name + " -w",
		done: func(st *fenceState) (bool, error) {
			cur := requestByUID(st, r)
			switch {
			case cur == nil:
				return false, fmt.Errorf("FencingRequest %s was deleted before node-fencing unfenced the node: see kubectl fenceline unfence %s", r.Name, o.Node)
			case cur.Status.Phase == fencingv1alpha1.FencingPhaseRecovered:
				return true, nil
			}
			return false, nil
		},
	}, nil
}

// askClear asks node-fencing to remove the marks a Failed or deleted
// request left on a node with no open request.
func askClear(ctx context.Context, c Clients, o UnfenceOptions, st *fenceState) (*Ask, error) {
	marks := nodefencing.MarksOf(st.node)
	if !marks.Any() {
		return nil, fmt.Errorf("node %s has no open FencingRequest and none of Fenceline's fencing marks: nothing to unfence%s", o.Node, prefixed("; ", st.input.Blocked))
	}
	in, failed := st.input, st.input.Failed
	if failed != nil {
		in.Failed = withAsk(failed, o)
	} else {
		n := st.node.DeepCopy()
		n.Annotations = withAskAnnotations(n.Annotations, o)
		in.Node = n
	}
	d := nodefencing.Decide(in)
	if !d.Clearing {
		return nil, fmt.Errorf("node %s is not back: %s; Fenceline's marks on it (%s) stay", o.Node, joinNonEmpty(": ", d.Reason, d.Why), marks)
	}
	if refused(d) {
		return nil, fmt.Errorf("node %s's marks cannot be cleared (%s): %s", o.Node, d.Reason, d.Why)
	}
	whose, object := "a deleted FencingRequest", "node/"+o.Node
	if failed != nil {
		whose, object = "FencingRequest "+failed.Name+" (Failed)", "fencingrequest/"+failed.Name
	}
	prompt := fmt.Sprintf("Ask node-fencing to remove what %s left on node %s (%s) once the node is Ready and shown rebooted?%s", whose, o.Node, marks, verifiedClause(o.Verified))
	if ok, err := o.Confirm(prompt); err != nil || !ok {
		return nil, errors.Join(ErrAborted, err)
	}
	if failed != nil {
		err := patchRequestAsk(ctx, c, failed, o)
		if err != nil {
			return nil, err
		}
	} else if err := patchNodeAsk(ctx, c, st, o); err != nil {
		return nil, err
	}
	return &Ask{
		Node: o.Node, Object: object,
		Asked: fmt.Sprintf("%s annotated %s=%s: node-fencing removes Fenceline's marks from node %s (%s)", object, names.UnfenceAnnotation, o.Requester, o.Node, decisionText(d)),
		Doing: "clear node " + o.Node, Watch: "kubectl fenceline status",
		done: func(st *fenceState) (bool, error) {
			if st.input.Request != nil {
				return false, fmt.Errorf("node %s has a new FencingRequest %s: its marks are that request's now", o.Node, st.input.Request.Name)
			}
			return !nodefencing.MarksOf(st.node).Any(), nil
		},
	}, nil
}

// refused reports decisions that an ask can never turn into an unfence:
// the boot ID shows the machine did not stop, or no boot ID can tell and
// nothing verified was stated.
func refused(d nodefencing.Decision) bool {
	return d.Reason == nodefencing.ReasonSameBootID || d.Reason == nodefencing.ReasonUnknownBootID
}

func decisionText(d nodefencing.Decision) string {
	if d.Step == nodefencing.StepNone {
		return "it waits: " + d.Why
	}
	return "now: " + d.Why
}

func verifiedClause(v string) string {
	if v == "" {
		return ""
	}
	return fmt.Sprintf(" You state that you verified the machine %s since its fence began.", strings.ToLower(v))
}

func prefixed(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// withAsk is a copy of r with the ask of o, for deciding before writing.
func withAsk(r *fencingv1alpha1.FencingRequest, o UnfenceOptions) *fencingv1alpha1.FencingRequest {
	cp := r.DeepCopy()
	cp.Annotations = withAskAnnotations(cp.Annotations, o)
	return cp
}

func withAskAnnotations(a map[string]string, o UnfenceOptions) map[string]string {
	out := map[string]string{names.UnfenceAnnotation: o.Requester}
	for k, v := range a {
		if k != names.UnfenceAnnotation && k != names.UnfenceVerifiedAnnotation {
			out[k] = v
		}
	}
	if o.Verified != "" {
		out[names.UnfenceVerifiedAnnotation] = o.Verified
	}
	return out
}

func patchRequestAsk(ctx context.Context, c Clients, r *fencingv1alpha1.FencingRequest, o UnfenceOptions) error {
	patch, err := askPatch(r.UID, o.Requester, o.Verified)
	if err != nil {
		return err
	}
	if _, err := c.Fencing.FencingV1alpha1().FencingRequests().Patch(ctx, r.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return permissionHint(err, "patch", "fencingrequests.fenceline.io")
	}
	return nil
}

// patchNodeAsk puts the ask on the Node: only when no request of it is
// left to carry it.
func patchNodeAsk(ctx context.Context, c Clients, st *fenceState, o UnfenceOptions) error {
	patch, err := askPatch(st.node.UID, o.Requester, o.Verified)
	if err != nil {
		return err
	}
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, o.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return permissionHint(err, "patch", "nodes")
	}
	return nil
}
