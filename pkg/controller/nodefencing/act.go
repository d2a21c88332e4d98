package nodefencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Event reasons on Nodes and FencingRequests.
const (
	EventRequested    = "FencingRequested"
	EventTriaged      = "FencingTriaged"
	EventRefused      = "FencingRefused"
	EventAdmitted     = "FencingStarted"
	EventFenced       = "NodeFenced"
	EventOutOfService = "NodeOutOfService"
	EventFailed       = "FencingFailed"
	EventRecovering   = "NodeRecovering"
	EventUnfenced     = "NodeUnfenced"
	EventCancelled    = "FencingCancelled"
	EventWaiting      = "FencingWaiting"
	// EventPaused (Warning, on the Node): the node would be fenced now,
	// but its policy is paused; recorded once until it changes.
	EventPaused = "FencingPaused"
)

// refusedRecheck is when a refused admission whose refusal does not lift
// by itself (another fence holds the slot, a storm) is looked at again,
// besides the node events that may lift it sooner.
const refusedRecheck = 5 * time.Second

// act makes the write of d. Every write re-decides on data read fresh from
// the API server first (recheck) and is skipped when the step changed.
func (c *Controller) act(ctx context.Context, in Input, d Decision) (time.Duration, error) {
	name := nodeName(in)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("node", name, "step", d.Step, "reason", d.Reason))
	switch d.Step {
	case StepNone:
		// Detection of a silent node rests on this recheck: no Lease
		// renewal enqueues an unfenced node.
		klog.FromContext(ctx).V(5).Info("Nothing to do", "node", name, "reason", d.Reason, "why", d.Why, "recheckAfter", d.RecheckAfter)
		if d.Clearing {
			return d.RecheckAfter, c.noteMarksStay(ctx, in, d)
		}
		c.notePaused(ctx, in, d)
		if wait := agentNoteDelay(in.Request, d, c.now()); wait > 0 {
			return wait, nil
		}
		return d.RecheckAfter, c.noteWaiting(ctx, in.Request, d)
	case StepCreate:
		return c.create(ctx, in, d)
	case StepTriage:
		return c.triage(ctx, in, d)
	case StepAdmit, StepTriageAdmit:
		return c.admit(ctx, in, d)
	case StepFenced:
		return 0, c.fenced(ctx, in, d)
	case StepFail:
		return 0, c.fail(ctx, in, d)
	case StepOutOfService:
		return 0, c.outOfService(ctx, in, d)
	case StepRecovering:
		return 0, c.recovering(ctx, in, d)
	case StepRecover:
		return 0, c.recover(ctx, in, d)
	case StepNetworkFence:
		return 0, c.networkFence(ctx, in, d)
	case StepNetworkUnfence:
		return 0, c.networkUnfence(ctx, in, d)
	case StepCancel:
		return 0, c.cancel(ctx, in, d)
	case StepClear:
		return 0, c.clearMarks(ctx, in, d)
	case StepCheckPower:
		return c.checkPower(ctx, in, d)
	}
	return 0, fmt.Errorf("unknown step %q", d.Step)
}

func nodeName(in Input) string {
	if in.Request != nil {
		return in.Request.Spec.NodeName
	}
	if in.Node != nil {
		return in.Node.Name
	}
	return ""
}

// create creates an automatic request, after deciding again on the node,
// its Lease and its requests as the API server has them now.
func (c *Controller) create(ctx context.Context, in Input, d Decision) (time.Duration, error) {
	fresh, err := c.freshInput(ctx, in.Node.Name, nil, nil, false)
	if err != nil {
		return 0, err
	}
	if fd := Decide(fresh); fd.Step != StepCreate {
		// The fresh decision's recheck is kept: no Lease renewal enqueues
		// an unfenced node, so without it a node that goes silent after
		// the renewal the cache had not delivered yet would be looked at
		// again only at its next Node event.
		klog.FromContext(ctx).V(2).Info("Not creating a FencingRequest: decision changed on fresh data", "why", fd.Why, "recheckAfter", fd.RecheckAfter)
		return afterChangedDecision(fd), nil
	}
	node := fresh.Node
	req := &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: fencingreq.GenerateName(node.Name),
			Labels:       map[string]string{names.FencingRequestNodeLabel: fencingreq.NodeLabelValue(node.Name)},
		},
		Spec: fencingv1alpha1.FencingRequestSpec{
			NodeName: node.Name, NodeUID: node.UID, PolicyName: fresh.Policy.Name,
			Reason: d.Reason, Requester: RequesterController, Action: fencingv1alpha1.FenceActionOff,
		},
	}
	created, err := c.cfg.Client.FencingV1alpha1().FencingRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("creating FencingRequest for node %s: %w", node.Name, err)
	}
	c.creations.mark(node.Name, created.UID, c.now())
	klog.FromContext(ctx).Info("Created FencingRequest", "request", created.Name, "why", d.Why)
	c.cfg.Actuator.Recorder.Eventf(node, v1.EventTypeWarning, EventRequested, "FencingRequest %s: %s", created.Name, d.Why)
	c.cfg.Metrics.ObserveFencingPhase(string(fencingv1alpha1.FencingPhasePending), d.Reason, time.Time{}, c.now())
	return 0, nil
}

// liveNode is the input's node if it is the request's (same UID, when the
// request recorded one), else nil: nothing of a request is ever written to
// a Node recreated under the same name.
func liveNode(in Input) *v1.Node {
	if in.Node == nil || in.Request == nil || in.Request.Spec.NodeUID == "" || in.Node.UID == in.Request.Spec.NodeUID {
		return in.Node
	}
	return nil
}

// triage marks the node triaged, then the request, after deciding again
// on the node, its Lease and request read fresh at once.
//
// Its reads are an admission's: when the fresh decision is to triage and
// admit at once (the node's state settled meanwhile), the admission goes
// on with them, provided no admission ended since they began; otherwise it
// reads again under the admission lock.
func (c *Controller) triage(ctx context.Context, in Input, d Decision) (time.Duration, error) {
	before := c.admissions.Load()
	reads, err := c.admissionReads(ctx, in)
	if err != nil {
		return 0, err
	}
	switch fd := Decide(reads.fresh); fd.Step {
	case StepTriage:
		return 0, c.triageWrites(ctx, reads.fresh, StepTriage, d)
	case StepTriageAdmit:
		c.admitMu.Lock()
		defer c.admitMu.Unlock()
		if c.admissions.Load() != before {
			reads, err = c.admissionReads(ctx, in)
			if err != nil {
				return 0, err
			}
		}
		return c.admitOn(ctx, reads, fd)
	default:
		klog.FromContext(ctx).V(2).Info("Not triaging: decision changed on fresh data", "why", fd.Why)
		return afterChangedDecision(fd), nil
	}
}

// triageWrites makes triage's writes for fresh, decided on with step: the
// node's mark, then the request's phase.
func (c *Controller) triageWrites(ctx context.Context, fresh Input, step Step, d Decision) error {
	r := fresh.Request
	m := stepMarks{
		taints: []v1.Taint{triagedTaint},
		why:    "FencingRequest " + r.Name + " triaged the node",
		conds:  []v1.NodeCondition{nodeCondition(names.FencingTriagedCondition, v1.ConditionTrue, r.Spec.Reason, fmt.Sprintf("FencingRequest %s: %s", r.Name, d.Why))},
	}
	return c.markThen(ctx, fresh, step, m, fencingv1alpha1.FencingPhaseTriaged, nil, func() error {
		return c.transition(ctx, r, fencingv1alpha1.FencingPhaseTriaged, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
			setTriaged(s, d.Why, now)
		}, phases(fencingv1alpha1.FencingPhasePending), "")
	})
}

// setTriaged sets what triage records on the request's status.
func setTriaged(s *fencingv1alpha1.FencingRequestStatus, why string, now metav1.Time) {
	if s.StartTime == nil {
		s.StartTime = &now
	}
	setCondition(s, fencingv1alpha1.FencingRequestTriaged, metav1.ConditionTrue, "Triaged", why, now)
}

// stepMarks are what a step writes on its node: taints, in one write,
// then conditions, in another.
type stepMarks struct {
	taints []v1.Taint
	why    string
	conds  []v1.NodeCondition
}

// markThen makes a step's writes on fresh, the inputs it was just decided
// on: its taints on the node read with them (a node changed since is read
// again and decided again), beside before (nil: nothing); then its phase
// write, to reach phase to, beside its conditions, which start from the
// node as the taints' write left it. Three round trips, not five: no write
// needs a read of its own. The conditions record the step: decided again
// after a conflict, they go ahead once the step's own phase landed, and
// never before the taints.
func (c *Controller) markThen(ctx context.Context, fresh Input, step Step, m stepMarks, to fencingv1alpha1.FencingPhase, before, phase func() error) error {
	r, node := fresh.Request, liveNode(fresh)
	var (
		first  errgroup.Group
		marked *v1.Node
	)
	if before != nil {
		first.Go(before)
	}
	if node != nil {
		first.Go(func() (err error) {
			marked, err = c.cfg.Actuator.AddTaintsFrom(ctx, node, m.taints, m.why, c.decidedOn(ctx, node, r, step))
			return err
		})
	}
	if err := first.Wait(); err != nil {
		return err
	}
	var then errgroup.Group
	if marked != nil {
		then.Go(func() error {
			_, err := c.setNodeConditionsFrom(ctx, marked, c.decidedOnAs(ctx, marked, r, step, landedIn(r, to)), m.conds...)
			return err
		})
	}
	then.Go(phase)
	return then.Wait()
}

// landedIn reports, as a pendingWrite, that the step's own phase write
// landed: r is in phase to.
func landedIn(r *fencingv1alpha1.FencingRequest, to fencingv1alpha1.FencingPhase) pendingWrite {
	return func(in *Input) bool {
		return in.Request != nil && in.Request.UID == r.UID && in.Request.Status.Phase == to
	}
}

// fenced records the proof on the node (FencingComplete), then the request.
// When the node is to go out of service next, its fence intents are written
// beside the condition, and the taint beside the request's phase, decided
// on what the step wrote (the node as its condition write left it, the
// request as the phase write makes it): no watch event and no read in
// between.
//
// The step makes no read round first: it rests on the proof alone (a level
// read back Off stays proven), and every write is made on the version it
// was decided on, the node's and the request's resourceVersion making the
// API server refuse a stale one (then it is read and decided again).
func (c *Controller) fenced(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	msg := fmt.Sprintf("FencingRequest %s: %s", r.Name, d.Why)
	read := liveNode(in)
	var node *v1.Node // as the condition's write left it; nil when gone
	if read != nil {
		var g errgroup.Group
		g.Go(func() (err error) {
			// FencingRequired stays True next to FencingComplete, as in
			// the proposal's timeline; both are cleared when the node
			// is unfenced.
			node, err = c.setNodeConditionsFrom(ctx, read, c.decidedOn(ctx, read, r, StepFenced),
				nodeCondition(names.FencingCompleteCondition, v1.ConditionTrue, d.Reason, msg))
			return err
		})
		if AppliesOutOfService(in.Policy) {
			// The power read back Off: the intent is true already.
			g.Go(func() error { return c.recordIntents(ctx, read) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
		c.cfg.Actuator.Recorder.Eventf(read, v1.EventTypeWarning, EventFenced, "%s", msg)
	}
	setFenced := func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
		s.Phase, s.FencedTime = fencingv1alpha1.FencingPhaseFenced, &now
		setCondition(s, fencingv1alpha1.FencingRequestComplete, metav1.ConditionTrue, d.Reason, d.Why, now)
	}
	next := in
	next.Node = node
	next.Request = r.DeepCopy()
	setFenced(&next.Request.Status, metav1.NewTime(c.now()))
	nd := Decide(next)
	oos := node != nil && nd.Step == StepOutOfService
	var (
		g       errgroup.Group
		written *fencingv1alpha1.FencingRequest
		tainted bool
	)
	g.Go(func() (err error) {
		written, err = c.transitionOut(ctx, r, fencingv1alpha1.FencingPhaseFenced, d, setFenced, phases(fencingv1alpha1.FencingPhaseFencing), EventFenced)
		return err
	})
	if oos {
		// Decided as the phase write makes the request, whether or not
		// that write has landed when the taint's is decided again: on a
		// request proven fenced (and only then) it is the write's own.
		pending := func(in *Input) bool {
			if Decide(*in).Step == StepFenced && in.Request.UID == r.UID {
				in.Request = in.Request.DeepCopy()
				setFenced(&in.Request.Status, metav1.NewTime(c.now()))
			}
			return false
		}
		g.Go(func() (err error) { tainted, err = c.taintOutOfService(ctx, next, nd, pending); return err })
	}
	if err := g.Wait(); err != nil || !tainted || written == nil {
		return err
	}
	return c.noteOutOfService(ctx, written)
}

// fail ends a request whose rounds all failed. The node keeps
// FencingRequired=True and its taints: it is not known to be off, so
// nothing of it is recovered.
func (c *Controller) fail(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	msg := fmt.Sprintf("FencingRequest %s failed: %s; the node stays unschedulable until it is back Ready with a new boot ID, or an operator who verified it was off or rebooted runs kubectl fenceline unfence %s --verified=rebooted", r.Name, d.Why, r.Spec.NodeName)
	if node := liveNode(in); node != nil {
		check := c.recheck(ctx, r, StepFail, false)
		if err := c.setNodeConditions(ctx, node, check, nodeCondition(names.FencingRequiredCondition, v1.ConditionTrue, "FencingFailed", msg)); err != nil {
			return err
		}
		c.cfg.Actuator.Recorder.Eventf(node, v1.EventTypeWarning, EventFailed, "%s", msg)
	}
	return c.transition(ctx, r, fencingv1alpha1.FencingPhaseFailed, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
		s.CompletionTime = &now
		s.ErrorReason, s.ErrorMessage = d.Reason, d.Why
		setCondition(s, fencingv1alpha1.FencingRequestFailed, metav1.ConditionTrue, d.Reason, d.Why, now)
	}, phases(fencingv1alpha1.FencingPhaseFencing), EventFailed)
}

// outOfService adds the out-of-service taint and the owner annotation in
// one write, so that Fenceline later removes only a taint it added.
func (c *Controller) outOfService(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	// Intent before cause: the attach/detach controller detaches every
	// volume of the node the moment the taint lands, and the attacher may
	// get to a detach only after the node was powered on and unfenced.
	// The decision's fresh reads are made beside the intents: both end
	// before the taint is written, one round trip instead of two.
	var (
		g     errgroup.Group
		fresh Input
	)
	g.Go(func() error { return c.recordIntents(ctx, in.Node) })
	g.Go(func() (err error) { fresh, err = c.freshInput(ctx, in.Node.Name, nil, r, false); return err })
	if err := g.Wait(); err != nil {
		return err
	}
	fd := Decide(fresh)
	if fd.Step != StepOutOfService || fresh.Node == nil {
		klog.FromContext(ctx).V(2).Info("Not adding the out-of-service taint: decision changed on fresh data", "why", fd.Why)
		return nil
	}
	return c.outOfServiceOn(ctx, fresh, d)
}

// outOfServiceOn adds the taint and the owner annotation on in's node, the
// version the step was decided on (a changed node is read and decided
// again), after the fence intents were recorded, then notes it on the
// request.
func (c *Controller) outOfServiceOn(ctx context.Context, in Input, d Decision) error {
	if tainted, err := c.taintOutOfService(ctx, in, d, nil); err != nil || !tainted {
		return err
	}
	return c.noteOutOfService(ctx, in.Request)
}

// taintOutOfService writes the out-of-service taint and the owner
// annotation in one write on in's node, checked on the decision in was
// decided with (pending: see recheckAs); it reports whether the taint is on
// the node.
func (c *Controller) taintOutOfService(ctx context.Context, in Input, d Decision, pending pendingWrite) (bool, error) {
	r := in.Request
	check := c.decidedOnAs(ctx, in.Node, r, StepOutOfService, pending)
	written, err := c.cfg.Actuator.UpdateNodeFrom(ctx, in.Node, "add out-of-service taint", check, func(n *v1.Node) bool {
		for _, t := range n.Spec.Taints {
			if t.Key == outOfServiceTaint.Key {
				return false
			}
		}
		t := outOfServiceTaint
		now := metav1.NewTime(c.now())
		t.TimeAdded = &now
		n.Spec.Taints = append(n.Spec.Taints, t)
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[ownerAnnotation] = string(r.UID)
		return true
	})
	if err != nil || written == nil {
		return false, err
	}
	c.cfg.Actuator.Recorder.Eventf(in.Node, v1.EventTypeWarning, EventOutOfService, "Added taint %s for FencingRequest %s: %s", outOfServiceTaint.ToString(), r.Name, d.Why)
	return true, nil
}

// noteOutOfService records on the request that the taint is on.
func (c *Controller) noteOutOfService(ctx context.Context, r *fencingv1alpha1.FencingRequest) error {
	return c.updateStatus(ctx, r, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		return setCondition(s, fencingv1alpha1.FencingRequestOutOfServiceApplied, metav1.ConditionTrue, "TaintAdded", "added "+outOfServiceTaint.ToString(), now)
	})
}

// recordIntents writes the fenced intent on every VolumeAttachment of the
// node before its out-of-service taint.
func (c *Controller) recordIntents(ctx context.Context, node *v1.Node) error {
	vas, err := nodeutil.VAsOnNode(c.vas, node.Name)
	if err != nil {
		return err
	}
	return c.cfg.Actuator.RecordIntent(ctx, actuator.Intent{Reason: cutoff.ReasonFenced, Controller: Name, Node: node, AllOfNode: true, Cached: vas})
}

// recovering notes that the node is back with a new boot ID.
func (c *Controller) recovering(ctx context.Context, in Input, d Decision) error {
	return c.transition(ctx, in.Request, fencingv1alpha1.FencingPhaseRecovering, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
		setCondition(s, fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, d.Reason, d.Why, now)
	}, phases(fencingv1alpha1.FencingPhaseFenced), EventRecovering)
}

// recover unfences: the conditions first (the attacher stops treating the
// node as cut off), then Fenceline's taints, the out-of-service one only if
// this request added it, then the request. Each node write re-decides on
// the fresh node and a fresh list of its VolumeAttachments.
func (c *Controller) recover(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	check := c.recheck(ctx, r, StepRecover, true)
	msg := fmt.Sprintf("FencingRequest %s: %s", r.Name, d.Why)
	if err := c.setNodeConditions(ctx, in.Node, check, unfencedConditions(msg)...); err != nil {
		return err
	}
	if err := c.removeTaints(ctx, in.Node, r, check, "unfence"); err != nil {
		return err
	}
	c.cfg.Actuator.Recorder.Eventf(in.Node, v1.EventTypeNormal, EventUnfenced, "%s", msg)
	return c.transition(ctx, r, fencingv1alpha1.FencingPhaseRecovered, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
		s.CompletionTime = &now
		setCondition(s, fencingv1alpha1.FencingRequestRecovered, metav1.ConditionTrue, d.Reason, d.Why, now)
	}, phases(fencingv1alpha1.FencingPhaseRecovering), EventUnfenced)
}

// cancel drops a request that was never admitted.
func (c *Controller) cancel(ctx context.Context, in Input, d Decision) error {
	r := in.Request
	if node := liveNode(in); node != nil {
		check := c.recheck(ctx, r, StepCancel, false)
		// An admission cut short by the cancel (FencingRequired written,
		// its taint refused on fresh data) must not leave the node marked
		// as about to be fenced.
		what := "set conditions " + names.FencingTriagedCondition + "=False (and " + names.FencingRequiredCondition + "=False if True)"
		err := c.cfg.Actuator.UpdateNodeStatus(ctx, node, what, check, func(n *v1.Node) bool {
			return applyNodeConditions(n, metav1.NewTime(c.now()), cancelledConditions(n, d.Reason, d.Why)...)
		})
		if err != nil {
			return err
		}
		if err := c.removeTaints(ctx, node, r, check, "cancel"); err != nil {
			return err
		}
	}
	return c.transition(ctx, r, fencingv1alpha1.FencingPhaseCancelled, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
		s.CompletionTime = &now
		setCondition(s, fencingv1alpha1.FencingRequestTriaged, metav1.ConditionFalse, d.Reason, d.Why, now)
	}, phases(fencingv1alpha1.FencingPhasePending, fencingv1alpha1.FencingPhaseTriaged), EventCancelled)
}

// cancelledConditions are the node conditions a cancelled request leaves:
// FencingTriaged False and, when n carries FencingRequired True (an
// admission that the cancel cut short), FencingRequired False too.
func cancelledConditions(n *v1.Node, reason, why string) []v1.NodeCondition {
	conds := []v1.NodeCondition{nodeCondition(names.FencingTriagedCondition, v1.ConditionFalse, reason, why)}
	if c := nodeutil.Condition(n, names.FencingRequiredCondition); c != nil && c.Status == v1.ConditionTrue {
		conds = append(conds, nodeCondition(names.FencingRequiredCondition, v1.ConditionFalse, reason, why))
	}
	return conds
}

// removeTaints removes Fenceline's fencing taints and, if this request
// added it (owner annotation), the out-of-service taint and the annotation,
// in one write.
func (c *Controller) removeTaints(ctx context.Context, node *v1.Node, r *fencingv1alpha1.FencingRequest, check actuator.NodeCheck, why string) error {
	return c.cfg.Actuator.UpdateNode(ctx, node, why+": remove fencing taints", check, func(n *v1.Node) bool {
		return stripFencingTaints(n, r)
	})
}

// stripFencingTaints removes from n Fenceline's fencing taints and, if the
// request added it (owner annotation), the out-of-service taint and the
// annotation. It reports whether n changed. A manual unfence makes the
// same change.
func stripFencingTaints(n *v1.Node, r *fencingv1alpha1.FencingRequest) bool {
	owned := OwnsOutOfService(n, r)
	kept := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		if t.Key == triagedTaint.Key || t.Key == requiredTaint.Key || (owned && t.Key == outOfServiceTaint.Key) {
			continue
		}
		kept = append(kept, t)
	}
	changed := len(kept) != len(n.Spec.Taints) || owned
	n.Spec.Taints = kept
	if owned {
		delete(n.Annotations, ownerAnnotation)
	}
	return changed
}

// agentNoteGrace is how long a request admitted to Fencing may go without
// a fence attempt before node-fencing notes that it waits for the fence
// agent. The agent starts a round the moment it sees the request admitted,
// with a write to the request's status: a note written meanwhile would make
// that write conflict and cost the fence two more round trips to the API
// server.
const agentNoteGrace = 10 * time.Second

// agentNoteDelay is how long to wait before noting that the request waits
// for the fence agent: the rest of agentNoteGrace since the agent's last
// sign of work (the admission, condition Required, or an attempt's start
// or end), so that the note does not race the agent's writes; 0 to note
// now, and for any other decision. The times only pace a note, never a
// decision; one more than agentNoteGrace ahead (a clock far off) is
// ignored.
func agentNoteDelay(r *fencingv1alpha1.FencingRequest, d Decision, now time.Time) time.Duration {
	if r == nil || d.Reason != ReasonAwaitingAgent {
		return 0
	}
	admitted := meta.FindStatusCondition(r.Status.Conditions, fencingv1alpha1.FencingRequestRequired)
	if admitted == nil || admitted.Status != metav1.ConditionTrue {
		return 0
	}
	var wait time.Duration
	last := func(t time.Time) {
		if left := t.Add(agentNoteGrace).Sub(now); left > wait && left <= agentNoteGrace {
			wait = left
		}
	}
	last(admitted.LastTransitionTime.Time)
	for _, a := range r.Status.Attempts {
		last(a.StartTime.Time)
		if a.EndTime != nil {
			last(a.EndTime.Time)
		}
	}
	return wait
}

// noteWaiting records, on the request, why it waits (once per reason).
func (c *Controller) noteWaiting(ctx context.Context, r *fencingv1alpha1.FencingRequest, d Decision) error {
	if r == nil || d.Reason == "" {
		return nil
	}
	cond := waitingCondition(r.Status.Phase)
	if cond == "" {
		return nil
	}
	apply := func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		changed := setConditionReason(s, cond, metav1.ConditionFalse, d.Reason, d.Why, now)
		if s.Phase == "" {
			s.Phase, changed = fencingv1alpha1.FencingPhasePending, true
		}
		return changed
	}
	changed, err := c.noteStatus(ctx, r, apply)
	if err == nil && changed {
		klog.FromContext(ctx).Info("FencingRequest waits", "request", r.Name, "why", d.Why)
		c.cfg.Recorder.Eventf(r, eventType(d.Reason), EventWaiting, "%s: %s", d.Reason, d.Why)
	}
	return err
}

// notePaused records, once per episode, that a candidate node without a
// request is not fenced because its policy is paused; a request that waits
// for the same reason says so in its own condition and Event.
func (c *Controller) notePaused(ctx context.Context, in Input, d Decision) {
	if in.Node == nil || in.Request != nil {
		return
	}
	held := d.Reason == ReasonPaused
	c.pausedMu.Lock()
	was := c.paused[in.Node.Name]
	if held {
		c.paused[in.Node.Name] = true
	} else {
		delete(c.paused, in.Node.Name)
	}
	c.pausedMu.Unlock()
	if held && !was {
		klog.FromContext(ctx).Info("Fencing paused", "why", d.Why)
		c.cfg.Actuator.Recorder.Eventf(in.Node, v1.EventTypeWarning, EventPaused, "%s", d.Why)
	}
}

// waitingCondition is the request condition that says why a request in the
// phase waits.
func waitingCondition(p fencingv1alpha1.FencingPhase) string {
	switch p {
	case "", fencingv1alpha1.FencingPhasePending:
		return fencingv1alpha1.FencingRequestTriaged
	case fencingv1alpha1.FencingPhaseTriaged:
		return fencingv1alpha1.FencingRequestRequired
	case fencingv1alpha1.FencingPhaseFencing:
		return fencingv1alpha1.FencingRequestComplete
	case fencingv1alpha1.FencingPhaseFenced, fencingv1alpha1.FencingPhaseRecovering, fencingv1alpha1.FencingPhaseFailed:
		// A Failed request waits for the marks it left to be cleared.
		return fencingv1alpha1.FencingRequestRecovered
	}
	return ""
}

func eventType(reason string) string {
	switch reason {
	case ReasonInvalidPolicy, ReasonSameBootID, ReasonUnknownBootID, ReasonExcluded, ReasonLyingFence,
		ReasonNetworkFenceFailed, ReasonNetworkFenceClassMissing, ReasonNoNodeAddresses, ReasonNetworkFenceUnavailable,
		ReasonNetworkFenceLifted, ReasonNetworkUnfenceFailed:
		return v1.EventTypeWarning
	}
	return v1.EventTypeNormal
}

// errRequestGone: the request was deleted or recreated since the decision.
var errRequestGone = errors.New("FencingRequest was deleted or recreated")

// changedStepRequeue is how soon a node whose fresh decision names another
// step than its cached one is looked at again.
const changedStepRequeue = 100 * time.Millisecond

// afterChangedDecision is when to look at a node again after the decision
// taken on fresh data, fd, differed from the cached one. Its recheck, and
// when it names a step of its own, at once: the world moved on between the
// two (the Lease went stale meanwhile, or the cache had not caught up), and
// that step must not wait for the node's next event. The step is taken
// by the next sync, decided again on the cache and again on fresh data.
func afterChangedDecision(fd Decision) time.Duration {
	if fd.Step != "" {
		return changedStepRequeue
	}
	return fd.RecheckAfter
}

func ignoreGone(err error) error {
	if errors.Is(err, errRequestGone) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// clearMarks removes the marks a Failed or deleted request left on a node
// that decideClear found safe to use again: the fencing conditions False
// first, then the taints, the out-of-service taint only if Fenceline added
// it, the owner annotation and the operator's ask, each node write
// re-decided on the fresh node, its requests and its VolumeAttachments
// listed from the API server. The Failed request then records that its
// marks were cleared (Recovered=True), so that it no longer blocks new
// requests for the node.
func (c *Controller) clearMarks(ctx context.Context, in Input, d Decision) error {
	check := c.recheck(ctx, nil, StepClear, true)
	msg := d.Why
	if err := c.setNodeConditions(ctx, in.Node, check, unfencedConditions(msg)...); err != nil {
		return err
	}
	if err := c.cfg.Actuator.UpdateNode(ctx, in.Node, "clear fencing marks", check, StripMarks); err != nil {
		return err
	}
	c.cfg.Actuator.Recorder.Eventf(in.Node, v1.EventTypeNormal, EventUnfenced, "%s", msg)
	if in.Failed == nil {
		return nil
	}
	return c.updateStatus(ctx, in.Failed, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		if s.Phase != fencingv1alpha1.FencingPhaseFailed {
			return false
		}
		return setCondition(s, fencingv1alpha1.FencingRequestRecovered, metav1.ConditionTrue, d.Reason, d.Why, now)
	})
}

// noteMarksStay says why the marks a request left stay: on the Failed
// request (its Recovered condition, once per reason, as noteWaiting does),
// or, with no request left, in a Warning Event on the node while an
// operator's ask waits there. The metric and its alert say it in every case.
func (c *Controller) noteMarksStay(ctx context.Context, in Input, d Decision) error {
	if in.Failed != nil {
		return c.noteWaiting(ctx, in.Failed, d)
	}
	if ask := AskOf(in.Node.Annotations); ask.Asked() {
		c.cfg.Actuator.Recorder.Eventf(in.Node, v1.EventTypeWarning, EventWaiting, "%s: %s", d.Reason, d.Why)
	}
	return nil
}
