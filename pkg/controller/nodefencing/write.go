package nodefencing

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/kube/apitext"
	"fenceline.io/fenceline/pkg/kube/fencingreq"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// updateStatus applies mutate to the request as the API server has it and
// writes the status, retrying on conflicts (the fence agent writes the
// attempts of the same status concurrently). A request deleted or
// recreated since the decision is left alone.
//
// The first try applies mutate to r itself, without a read: the write
// carries r's resourceVersion, so the API server refuses it (a conflict,
// then a fresh read) unless r is the current version. A slow API server
// then costs one round trip per write, not two. When mutate finds nothing
// to write on r, that is confirmed on the request read fresh: a lagging
// copy must not skip a write.
func (c *Controller) updateStatus(ctx context.Context, r *fencingv1alpha1.FencingRequest, mutate func(*fencingv1alpha1.FencingRequestStatus, metav1.Time) bool) error {
	_, err := c.writeStatus(ctx, r, mutate)
	return err
}

// writeStatus is updateStatus that returns the request as written; nil
// when nothing was written.
func (c *Controller) writeStatus(ctx context.Context, r *fencingv1alpha1.FencingRequest, mutate func(*fencingv1alpha1.FencingRequestStatus, metav1.Time) bool) (*fencingv1alpha1.FencingRequest, error) {
	client := c.cfg.Client.FencingV1alpha1().FencingRequests()
	held := r.ResourceVersion != ""
	var written *fencingv1alpha1.FencingRequest
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur *fencingv1alpha1.FencingRequest
		if held {
			held, cur = false, r.DeepCopy()
			if !mutate(&cur.Status, metav1.NewTime(c.now())) {
				cur = nil // nothing to write on r: judge it again on a fresh read
			}
		}
		if cur == nil {
			var err error
			if cur, err = client.Get(ctx, r.Name, metav1.GetOptions{}); err != nil {
				return err
			}
			if cur.UID != r.UID {
				return errRequestGone
			}
			if !mutate(&cur.Status, metav1.NewTime(c.now())) {
				return nil
			}
		}
		cur.Status.ObservedGeneration = cur.Generation
		read := cur.ResourceVersion
		out, err := client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil && out.ResourceVersion != read {
			c.written.mark(r.UID, r.ResourceVersion, read)
		}
		if err == nil {
			written = out
		}
		return err
	})
	if err != nil && ignoreGone(err) == nil {
		klog.FromContext(ctx).V(2).Info("FencingRequest gone before its status write", "request", r.Name)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("updating status of FencingRequest %s: %w", r.Name, err)
	}
	return written, nil
}

// noteStatus is updateStatus for writes that only report (a waiting note,
// the storage report): most syncs change nothing, so mutate is judged on
// the cached request first and the API server is not asked when it changes
// nothing there. It reports whether it wrote. Never for a write a decision
// depends on: a lagging cache could hide it.
func (c *Controller) noteStatus(ctx context.Context, r *fencingv1alpha1.FencingRequest, mutate func(*fencingv1alpha1.FencingRequestStatus, metav1.Time) bool) (bool, error) {
	if !mutate(r.Status.DeepCopy(), metav1.NewTime(c.now())) {
		return false, nil
	}
	changed := false
	err := c.updateStatus(ctx, r, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		changed = mutate(s, now)
		return changed
	})
	return changed, err
}

// transition moves the request to phase to, if it is still in one of the
// phases from (an empty phase counts as Pending), applying mutate in the
// same write; then it records an Event and the metric. The phase is checked
// on the request as the API server has it, so a lagging cache never moves
// a request from a phase it already left.
func (c *Controller) transition(ctx context.Context, r *fencingv1alpha1.FencingRequest, to fencingv1alpha1.FencingPhase, d Decision,
	mutate func(*fencingv1alpha1.FencingRequestStatus, metav1.Time), from []fencingv1alpha1.FencingPhase, event string) error {
	_, err := c.transitionOut(ctx, r, to, d, mutate, from, event)
	return err
}

// transitionOut is transition that returns the request as written; nil
// when it did not move.
func (c *Controller) transitionOut(ctx context.Context, r *fencingv1alpha1.FencingRequest, to fencingv1alpha1.FencingPhase, d Decision,
	mutate func(*fencingv1alpha1.FencingRequestStatus, metav1.Time), from []fencingv1alpha1.FencingPhase, event string) (*fencingv1alpha1.FencingRequest, error) {
	moved := false
	written, err := c.writeStatus(ctx, r, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) bool {
		cur := s.Phase
		if cur == "" {
			cur = fencingv1alpha1.FencingPhasePending
		}
		if !slices.Contains(from, cur) {
			return false
		}
		s.Phase = to
		mutate(s, now)
		moved = true
		return true
	})
	if err != nil || !moved || written == nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("FencingRequest phase", "request", r.Name, "phase", to, "why", d.Why)
	if event == "" {
		event = "Fencing" + string(to)
	}
	typ := v1.EventTypeNormal
	if to == fencingv1alpha1.FencingPhaseFailed || to == fencingv1alpha1.FencingPhaseFenced {
		typ = v1.EventTypeWarning
	}
	c.cfg.Recorder.Eventf(r, typ, event, "%s: %s", to, d.Why)
	c.cfg.Metrics.ObserveFencingPhase(string(to), d.Reason, r.CreationTimestamp.Time, c.now())
	return written, nil
}

// phases is a set of phases for transition.
func phases(ps ...fencingv1alpha1.FencingPhase) []fencingv1alpha1.FencingPhase { return ps }

// setCondition sets a request condition; it reports a change of status,
// reason or message.
func setCondition(s *fencingv1alpha1.FencingRequestStatus, typ string, status metav1.ConditionStatus, reason, msg string, now metav1.Time) bool {
	return meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: apitext.Truncate(msg, 1024), LastTransitionTime: now})
}

// setConditionReason sets the condition only when its status or reason
// changes, so that a message with a countdown does not rewrite the status
// at every sync.
func setConditionReason(s *fencingv1alpha1.FencingRequestStatus, typ string, status metav1.ConditionStatus, reason, msg string, now metav1.Time) bool {
	if c := meta.FindStatusCondition(s.Conditions, typ); c != nil && c.Status == status && c.Reason == reason {
		return false
	}
	return setCondition(s, typ, status, reason, msg, now)
}

// nodeCondition is a Node condition to set (times are filled on write).
func nodeCondition(typ string, status v1.ConditionStatus, reason, msg string) v1.NodeCondition {
	return v1.NodeCondition{Type: v1.NodeConditionType(typ), Status: status, Reason: reason, Message: apitext.Truncate(msg, 1024)}
}

// setNodeConditions writes the conditions to the node's status after check
// re-decided on the fresh node. A condition whose status and reason are
// already set is left as it is.
func (c *Controller) setNodeConditions(ctx context.Context, node *v1.Node, check actuator.NodeCheck, conds ...v1.NodeCondition) error {
	_, err := c.writeNodeConditions(ctx, node, nil, check, conds...)
	return err
}

// setNodeConditionsFrom is setNodeConditions starting from fresh, the node
// as node-fencing just read or wrote it, without a read of its own. It
// returns the node as written (nil when it is gone or was recreated).
func (c *Controller) setNodeConditionsFrom(ctx context.Context, fresh *v1.Node, check actuator.NodeCheck, conds ...v1.NodeCondition) (*v1.Node, error) {
	return c.writeNodeConditions(ctx, fresh, fresh, check, conds...)
}

func (c *Controller) writeNodeConditions(ctx context.Context, node, fresh *v1.Node, check actuator.NodeCheck, conds ...v1.NodeCondition) (*v1.Node, error) {
	what := "set conditions"
	for _, cd := range conds {
		what += fmt.Sprintf(" %s=%s", cd.Type, cd.Status)
	}
	return c.cfg.Actuator.UpdateNodeStatusFrom(ctx, node, fresh, what, check, func(n *v1.Node) bool {
		return c.applyConditions(n, conds...)
	})
}

// applyConditions sets conds, and the lifecycle conditions derived from
// them when enabled, on n; it reports whether n changed.
func (c *Controller) applyConditions(n *v1.Node, conds ...v1.NodeCondition) bool {
	now := metav1.NewTime(c.now())
	changed := applyNodeConditions(n, now, conds...)
	if c.cfg.LifecycleConditions {
		// Derived from the fresh node's fencing conditions as they are
		// now, in the same write: no round trip of their own.
		changed = applyNodeConditions(n, now, LifecycleConditions(n.Status.Conditions)...) || changed
	}
	return changed
}

// applyNodeConditions sets the conditions in n's status, with now as the
// heartbeat time and, for a changed status, the transition time. A
// condition whose status and reason are already set is left as it is. It
// reports whether n changed.
func applyNodeConditions(n *v1.Node, now metav1.Time, conds ...v1.NodeCondition) bool {
	changed := false
	for _, cd := range conds {
		i := slices.IndexFunc(n.Status.Conditions, func(x v1.NodeCondition) bool { return x.Type == cd.Type })
		if i < 0 {
			cd.LastTransitionTime, cd.LastHeartbeatTime = now, now
			n.Status.Conditions = append(n.Status.Conditions, cd)
			changed = true
			continue
		}
		old := n.Status.Conditions[i]
		if old.Status == cd.Status && old.Reason == cd.Reason {
			continue
		}
		cd.LastHeartbeatTime, cd.LastTransitionTime = now, old.LastTransitionTime
		if old.Status != cd.Status {
			cd.LastTransitionTime = now
		}
		n.Status.Conditions[i] = cd
		changed = true
	}
	return changed
}

// unfencedConditions are the node conditions of an unfenced node: the three
// fencing conditions False, reason Unfenced, with msg.
func unfencedConditions(msg string) []v1.NodeCondition {
	return []v1.NodeCondition{
		nodeCondition(names.FencingCompleteCondition, v1.ConditionFalse, "Unfenced", msg),
		nodeCondition(names.FencingRequiredCondition, v1.ConditionFalse, "Unfenced", msg),
		nodeCondition(names.FencingTriagedCondition, v1.ConditionFalse, "Unfenced", msg),
	}
}

// recheck returns the write-time check of a node write for step: Decide
// again on the fresh node, the request and the node's Lease as the API
// server has them, and (freshVAs) the node's VolumeAttachments listed from
// the API server rather than the cache.
//
// The reads besides the node start at once, beside the actuator's read of
// the node, so that a write costs two round trips to the API server, not
// three (a slow API server multiplies each); every one still starts after
// the decision being re-checked and ends before the write. The first check
// uses them; a second one (a retry after a conflict, a second write with
// the same check) reads everything again.
func (c *Controller) recheck(ctx context.Context, r *fencingv1alpha1.FencingRequest, step Step, freshVAs bool) actuator.NodeCheck {
	return c.recheckAs(ctx, r, step, freshVAs, nil)
}

// pendingWrite adjusts a write's fresh decision inputs for another write of
// the same step made beside it, whose effect they may or may not show yet.
// It may apply that write to in (the out-of-service taint beside the Fenced
// phase: decided on the request as the phase write makes it), or report
// that the inputs show it landed and the write is the step's own record
// (the admission's node conditions beside its phase): then the write goes
// ahead without deciding again.
type pendingWrite func(in *Input) (landed bool)

// recheckAs is recheck deciding on the fresh inputs as pending makes them;
// nil decides on them as read.
func (c *Controller) recheckAs(ctx context.Context, r *fencingv1alpha1.FencingRequest, step Step, freshVAs bool, pending pendingWrite) actuator.NodeCheck {
	var early <-chan freshResult
	if r != nil {
		ch := make(chan freshResult, 1)
		go func() {
			reads, err := c.readFresh(ctx, r.Spec.NodeName, false, r, freshVAs)
			ch <- freshResult{reads, err}
		}()
		early = ch
	}
	return func(node *v1.Node) (bool, string) {
		var res freshResult
		if early != nil && r.Spec.NodeName == node.Name {
			res, early = <-early, nil
		} else {
			res.reads, res.err = c.readFresh(ctx, node.Name, false, r, freshVAs)
		}
		if res.err != nil {
			return false, res.err.Error()
		}
		res.reads.node = node
		in, err := c.inputOf(node.Name, res.reads)
		if err != nil {
			return false, err.Error()
		}
		if pending != nil && pending(&in) {
			return true, "the step's own write beside it landed"
		}
		d := Decide(in)
		if d.Step != step {
			return false, fmt.Sprintf("the step is now %q: %s", d.Step, d.Why)
		}
		return true, d.Why
	}
}

// decidedOn is the check of a write made on node, the version a step was
// decided on from fresh reads (or the version node-fencing's own checked
// write of the step produced): that very version passes, since the write's
// resourceVersion makes the API server refuse it once the node changed;
// any other version, read after a conflict, is decided again on fresh
// reads, as recheck does.
func (c *Controller) decidedOn(ctx context.Context, node *v1.Node, r *fencingv1alpha1.FencingRequest, step Step) actuator.NodeCheck {
	return c.decidedOnAs(ctx, node, r, step, nil)
}

// decidedOnAs is decidedOn whose fresh decision applies pending (see
// recheckAs).
func (c *Controller) decidedOnAs(ctx context.Context, node *v1.Node, r *fencingv1alpha1.FencingRequest, step Step, pending pendingWrite) actuator.NodeCheck {
	var again actuator.NodeCheck
	return func(n *v1.Node) (bool, string) {
		if n.UID == node.UID && n.ResourceVersion != "" && n.ResourceVersion == node.ResourceVersion {
			return true, "decided on this version of the node"
		}
		if again == nil {
			again = c.recheckAs(ctx, r, step, false, pending)
		}
		return again(n)
	}
}

// freshReads are a node's decision inputs as the API server has them.
type freshReads struct {
	node   *v1.Node // nil when it does not exist
	lease  *coordinationv1.Lease
	target *fencingv1alpha1.FenceTarget
	// vas is set when the VolumeAttachments were listed.
	vas     []*storagev1.VolumeAttachment
	vasRead bool
	// request is r as the API server has it (nil when deleted); requests,
	// when r was nil, the node's requests.
	request  *fencingv1alpha1.FencingRequest
	requests []*fencingv1alpha1.FencingRequest
	listed   bool
	// netFences are the request's NetworkFences, when netRead.
	netFences []networkfence.Fence
	netErr    error
	netRead   bool
}

type freshResult struct {
	reads freshReads
	err   error
}

// freshInput is gather with the node (unless given), its Lease, the request
// (or, with none, the node's requests) and optionally its VolumeAttachments
// read from the API server.
func (c *Controller) freshInput(ctx context.Context, nodeName string, node *v1.Node, r *fencingv1alpha1.FencingRequest, freshVAs bool) (Input, error) {
	reads, err := c.readFresh(ctx, nodeName, node == nil, r, freshVAs)
	if err != nil {
		return Input{}, err
	}
	if node != nil {
		reads.node = node
	}
	return c.inputOf(nodeName, reads)
}

// readFresh reads the node (readNode), its Lease, FenceTarget, request (or,
// with none, its requests) and optionally its VolumeAttachments from the
// API server. The reads are independent: made at once, they cost one round
// trip, not five.
func (c *Controller) readFresh(ctx context.Context, nodeName string, readNode bool, r *fencingv1alpha1.FencingRequest, freshVAs bool) (freshReads, error) {
	var (
		g     errgroup.Group
		reads freshReads
	)
	if readNode {
		g.Go(func() error {
			n, err := c.cfg.Actuator.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("reading node %s: %w", nodeName, err)
			default:
				reads.node = n
			}
			return nil
		})
	}
	g.Go(func() (err error) { reads.lease, err = c.freshLease(ctx, nodeName); return err })
	g.Go(func() (err error) { reads.target, err = c.freshTarget(ctx, nodeName); return err })
	if freshVAs {
		g.Go(func() (err error) {
			reads.vas, err = view.API{Client: c.cfg.Actuator.Client}.VolumeAttachmentsOnNode(ctx, nodeName)
			reads.vasRead = true
			return err
		})
	}
	g.Go(func() error { return c.freshRequest(ctx, &reads, nodeName, r) })
	if c.needsFreshNetworkFences(r) {
		g.Go(func() error {
			reads.netFences, reads.netErr = c.netFencesAPI.FencesOf(ctx, r.UID)
			reads.netRead = true
			if errors.Is(reads.netErr, networkfence.ErrNotServed) {
				return nil // an answer: none can exist
			}
			return reads.netErr
		})
	}
	return reads, g.Wait()
}

// needsFreshNetworkFences: the request may have NetworkFences (Fenced or
// Recovering, and its policy makes them or the cache knows some), so a
// write re-checks them fresh. Others skip the read, which on a slow API
// server is a round trip every step would pay.
func (c *Controller) needsFreshNetworkFences(r *fencingv1alpha1.FencingRequest) bool {
	if c.netFencesAPI == nil || r == nil || (r.Status.Phase != fencingv1alpha1.FencingPhaseFenced && r.Status.Phase != fencingv1alpha1.FencingPhaseRecovering) {
		return false
	}
	if r.Spec.PolicyName == "" {
		return true // resolved by selector: read them rather than guess
	}
	if p, err := c.policies.Get(r.Spec.PolicyName); err == nil && len(networkFenceMethods(p)) > 0 {
		return true
	}
	cached, err := c.netFences.FencesOf(context.Background(), r.UID)
	return err != nil && !errors.Is(err, networkfence.ErrNotServed) || len(cached) > 0
}

// inputOf is gather with the fresh reads in place of the caches'.
func (c *Controller) inputOf(nodeName string, reads freshReads) (Input, error) {
	in, err := c.gather(nodeName, reads.node)
	if err != nil {
		return in, err
	}
	if reads.node == nil {
		in.Node = nil
	}
	if reads.listed {
		in.SetRequests(reads.requests)
	} else {
		in.Request = reads.request
	}
	in.Lease, in.Target = reads.lease, reads.target
	in.LeaseObserved, in.LeaseRenewed = c.observation(in.Lease)
	if reads.vasRead {
		in.VolumeAttachments = len(reads.vas)
	}
	if err := c.resolve(&in); err != nil {
		return in, err
	}
	// The request may be fresher than the cached one gather read them for;
	// the NetworkFences read fresh take the cache's place.
	nf := c.netReader()
	if reads.netRead {
		nf = freshFences{Reader: nf, fences: reads.netFences, err: reads.netErr}
	}
	return in, GatherNetworkFences(context.Background(), nf, &in)
}

// freshFences is the cached reader with the request's NetworkFences as
// readFresh read them (or failed to); classes still come from the cache.
type freshFences struct {
	networkfence.Reader
	fences []networkfence.Fence
	err    error
}

func (f freshFences) FencesOf(context.Context, types.UID) ([]networkfence.Fence, error) {
	return f.fences, f.err
}

// freshTarget reads the node's FenceTarget (nil when it has none).
func (c *Controller) freshTarget(ctx context.Context, name string) (*fencingv1alpha1.FenceTarget, error) {
	t, err := c.cfg.Client.FencingV1alpha1().FenceTargets().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading FenceTarget %s: %w", name, err)
	}
	return t, nil
}

func (c *Controller) freshLease(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return nodeutil.ReadLease(ctx, c.cfg.Actuator.Client, name)
}

// freshRequest reads r as the API server has it, or, when r is nil, the
// node's requests listed from the API server (and those only the cache
// knows).
func (c *Controller) freshRequest(ctx context.Context, reads *freshReads, nodeName string, r *fencingv1alpha1.FencingRequest) error {
	client := c.cfg.Client.FencingV1alpha1().FencingRequests()
	if r != nil {
		cur, err := client.Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			reads.request = nil
			return nil
		case err != nil:
			return fmt.Errorf("reading FencingRequest %s: %w", r.Name, err)
		}
		reads.request = cur
		return nil
	}
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{names.FencingRequestNodeLabel: fencingreq.NodeLabelValue(nodeName)}).String()})
	if err != nil {
		return fmt.Errorf("listing FencingRequests of node %s: %w", nodeName, err)
	}
	reqs := make([]*fencingv1alpha1.FencingRequest, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == nodeName {
			reqs = append(reqs, &list.Items[i])
		}
	}
	// Requests made by hand carry no label: the cache's index adds them.
	cached, err := c.requestsOf(nodeName)
	if err != nil {
		return err
	}
	for _, cr := range cached {
		if !slices.ContainsFunc(reqs, func(x *fencingv1alpha1.FencingRequest) bool { return x.UID == cr.UID }) {
			reqs = append(reqs, cr)
		}
	}
	reads.requests, reads.listed = reqs, true
	return nil
}
