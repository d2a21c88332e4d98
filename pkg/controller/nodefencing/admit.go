package nodefencing

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/stormguard"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// admit moves a triaged request to Fencing when the storm guard admits it;
// for StepTriageAdmit it triages a pending one in the same step, and only
// triages it when the guard refuses. Admissions are serialised and decided
// on fresh data: the candidate, its Lease and request are read from the
// API server, and the fences in progress are listed from it, so that a
// lagging cache never lets two admissions share one concurrency slot. A
// manual request (a human asked, and approved) is not subject to the storm
// guard.
func (c *Controller) admit(ctx context.Context, in Input, d Decision) (time.Duration, error) {
	c.admitMu.Lock()
	defer c.admitMu.Unlock()
	reads, err := c.admissionReads(ctx, in)
	if err != nil {
		return 0, err
	}
	return c.admitOn(ctx, reads, d)
}

// admission are an admission's fresh reads: the candidate's inputs and
// what the storm guard reads.
type admission struct {
	fresh  Input
	guards guardReads
}

// admissionReads makes every read of an admission at once: one round trip
// to the API server, not four (a slow one multiplies each).
func (c *Controller) admissionReads(ctx context.Context, in Input) (admission, error) {
	r := in.Request
	var (
		g   errgroup.Group
		out admission
	)
	g.Go(func() (err error) { out.fresh, err = c.freshInput(ctx, r.Spec.NodeName, nil, r, false); return err })
	if automatic(r) && in.Policy != nil {
		g.Go(func() (err error) { out.guards, err = c.readGuard(ctx, in.Policy.Name); return err })
	}
	return out, g.Wait()
}

// admitOn is admit on reads made after every admission before it had
// ended; the caller holds admitMu. It counts the admission (admissions),
// so that reads made while it ran are known to be older than it.
func (c *Controller) admitOn(ctx context.Context, reads admission, d Decision) (time.Duration, error) {
	defer c.admissions.Add(1)
	fresh, guards := reads.fresh, reads.guards
	r := fresh.Request
	fd := Decide(fresh)
	if fd.Step != d.Step {
		klog.FromContext(ctx).V(2).Info("Not admitting: decision changed on fresh data", "why", fd.Why)
		return afterChangedDecision(fd), nil
	}
	both := d.Step == StepTriageAdmit
	var save func() error // the storm guard's state, nil for none
	if automatic(r) {
		g, saveGuard, err := c.guard(ctx, fresh, guards)
		if err != nil {
			return 0, err
		}
		if !g.Admit {
			if err := saveGuard(); err != nil {
				return 0, err
			}
			if both {
				// Triaged now; the refusal is noted by the admission
				// that follows, which asks the guard again.
				return 0, c.triageWrites(ctx, fresh, d.Step, triageDecision(r))
			}
			return c.refused(ctx, fresh, g)
		}
		d.Why, save = g.Why, saveGuard
	}
	from := phases(fencingv1alpha1.FencingPhaseTriaged)
	if both {
		from = phases(fencingv1alpha1.FencingPhasePending)
	}
	bootID := ""
	if node := liveNode(fresh); node != nil {
		bootID = node.Status.NodeInfo.BootID
	}
	var written *fencingv1alpha1.FencingRequest
	// The guard's state is saved beside the node's taints: both end before
	// the request is admitted.
	err := c.markThen(ctx, fresh, d.Step, admittedMarks(r, d, both), fencingv1alpha1.FencingPhaseFencing, save, func() (err error) {
		written, err = c.transitionOut(ctx, r, fencingv1alpha1.FencingPhaseFencing, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
			if both {
				setTriaged(s, fd.Why, now)
			}
			s.BootIDAtFence = bootID
			setCondition(s, fencingv1alpha1.FencingRequestRequired, metav1.ConditionTrue, "Admitted", d.Why, now)
		}, from, EventAdmitted)
		return err
	})
	if both && written != nil {
		// The triage happened too: its Event and transition count, as a
		// step of its own would record them.
		c.cfg.Recorder.Eventf(written, v1.EventTypeNormal, EventTriaged, "%s: %s", fencingv1alpha1.FencingPhaseTriaged, fd.Why)
		c.cfg.Metrics.ObserveFencingPhase(string(fencingv1alpha1.FencingPhaseTriaged), r.Spec.Reason, r.CreationTimestamp.Time, c.now())
	}
	return 0, err
}

// admittedMarks are the node's marks of an admission (and of the triage,
// with both).
func admittedMarks(r *fencingv1alpha1.FencingRequest, d Decision, both bool) stepMarks {
	msg := fmt.Sprintf("FencingRequest %s: %s", r.Name, d.Why)
	m := stepMarks{
		taints: []v1.Taint{requiredTaint},
		why:    "FencingRequest " + r.Name + " admitted: the node is about to be fenced",
		conds:  []v1.NodeCondition{nodeCondition(names.FencingRequiredCondition, v1.ConditionTrue, r.Spec.Reason, msg)},
	}
	if both {
		m.taints = []v1.Taint{triagedTaint, requiredTaint}
		m.conds = append([]v1.NodeCondition{nodeCondition(names.FencingTriagedCondition, v1.ConditionTrue, r.Spec.Reason, msg)}, m.conds...)
	}
	return m
}

// refused records a refusal on the request; a final one fails it.
func (c *Controller) refused(ctx context.Context, in Input, g stormguard.Decision) (time.Duration, error) {
	d := Decision{Reason: g.Reason, Why: g.Why}
	c.cfg.Metrics.ObserveFencingRefusal(g.Reason)
	if g.Final {
		d.Step = StepFail
		return 0, c.transition(ctx, in.Request, fencingv1alpha1.FencingPhaseFailed, d, func(s *fencingv1alpha1.FencingRequestStatus, now metav1.Time) {
			s.CompletionTime = &now
			s.ErrorReason, s.ErrorMessage = g.Reason, g.Why
			setCondition(s, fencingv1alpha1.FencingRequestFailed, metav1.ConditionTrue, g.Reason, g.Why, now)
		}, phases(fencingv1alpha1.FencingPhaseTriaged), EventFailed)
	}
	if err := c.noteWaiting(ctx, in.Request, d); err != nil {
		return 0, err
	}
	if g.RetryAfter > 0 {
		return g.RetryAfter, nil
	}
	return refusedRecheck, nil
}

// guardReads are what the storm guard reads from the API server for an
// admission: the requests (which fences are in progress) and the policy
// (its saved state, and where to save the new one).
type guardReads struct {
	requests []fencingv1alpha1.FencingRequest
	policy   *fencingv1alpha1.FencePolicy
}

// readGuard makes the storm guard's reads, at once.
func (c *Controller) readGuard(ctx context.Context, policy string) (guardReads, error) {
	var (
		g   errgroup.Group
		out guardReads
	)
	g.Go(func() error {
		reqs, err := c.cfg.Client.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing FencingRequests: %w", err)
		}
		out.requests = reqs.Items
		return nil
	})
	g.Go(func() error {
		p, err := c.cfg.Client.FencingV1alpha1().FencePolicies().Get(ctx, policy, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading FencePolicy %s for its storm-guard state: %w", policy, err)
		}
		out.policy = p
		return nil
	})
	return out, g.Wait()
}

// guard runs the storm guard for the input's node. It keeps the policy's
// bucket and storm state in memory and returns the write that keeps them
// in the policy's status too (a restart restores them): the caller makes
// it before the decision takes effect. The write is a no-op when the
// state need not be saved.
func (c *Controller) guard(ctx context.Context, in Input, reads guardReads) (stormguard.Decision, func() error, error) {
	if in.Policy == nil || reads.policy == nil {
		return stormguard.Decision{}, nil, fmt.Errorf("no FencePolicy to guard the admission of node %s", in.Request.Spec.NodeName)
	}
	pol, qps, burst := GuardPolicy(in.Policy)
	nodes, err := c.stormView(in, reads.requests, pol.Zones.ZoneLabel)
	if err != nil {
		return stormguard.Decision{}, nil, err
	}
	st := c.loadGuard(ctx, reads.policy, pol.Cooldown, in.Now)
	st.bucket.QPS, st.bucket.Burst = qps, burst
	zone := ""
	if in.Node != nil {
		zone = stormguard.ZoneOf(in.Node, pol.Zones.ZoneLabel)
	}
	g := stormguard.Admit(stormguard.Input{
		Candidate: stormguard.Candidate{Name: in.Request.Spec.NodeName, Zone: zone},
		Attempts:  int(in.Request.Status.FailedRounds),
		Nodes:     nodes, Policy: pol, Bucket: st.bucket, Storm: st.storm, Now: in.Now,
	})
	next := guardState{bucket: g.NewBucket, storm: g.NewStorm}
	mustSave := stormguard.MustSave(g, st.storm)
	save := func() error {
		if mustSave {
			if err := c.saveGuard(ctx, reads.policy, next, in.Now); err != nil {
				return err
			}
		}
		// Kept in memory once saved; admissions are serialised
		// (admitMu), and the caller makes this write under it.
		c.guards[in.Policy.Name] = next
		return nil
	}
	return g, save, nil
}

// stormView is every node the policy selects as the storm guard sees it:
// healthy when Ready, not Suspect and not a fencing candidate, fencing when it has a
// request in phase Fencing (listed from the API server). The candidate
// comes from in, read fresh.
func (c *Controller) stormView(in Input, reqs []fencingv1alpha1.FencingRequest, zoneLabel string) ([]stormguard.NodeHealth, error) {
	rules := DetectRules(in.Policy)
	nodes, err := c.nodes.List(rules.Selector)
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	fencing := map[string]bool{}
	for _, r := range reqs {
		if r.Status.Phase == fencingv1alpha1.FencingPhaseFencing {
			fencing[r.Spec.NodeName] = true
		}
	}
	out := make([]stormguard.NodeHealth, 0, len(nodes))
	for _, n := range nodes {
		lease, err := c.lease(n.Name)
		if err != nil {
			return nil, err
		}
		if in.Node != nil && n.Name == in.Node.Name {
			n, lease = in.Node, in.Lease
		}
		renewal := detect.Renewal{Lease: lease, ObservedAt: c.observed(lease)}
		// A node that missed a renewal counts as unhealthy: nodes that
		// stopped together must be seen together (detect.Suspect).
		healthy := nodeutil.IsReady(n) && !detect.Suspect(renewal, in.Now) && !detect.Unhealthy(n, renewal, rules, in.Now).Candidate
		out = append(out, stormguard.NodeHealth{Name: n.Name, Zone: stormguard.ZoneOf(n, zoneLabel), Healthy: healthy, Fencing: fencing[n.Name]})
	}
	return out, nil
}
