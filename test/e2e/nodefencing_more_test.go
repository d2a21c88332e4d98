package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/test/world"
)

// newFencingScenarioWith is newFencingScenario on a world started with
// opts (Fencing is turned on).
func newFencingScenarioWith(t *testing.T, opts world.Options, kind world.BMCKind, edit func(*fencingv1alpha1.FencePolicy)) *fencingScenario {
	t.Helper()
	opts.Fencing = true
	s := newScenario(t, opts)
	setup, err := s.w.SetUpFencing(s.ctx, kind, s.timeline, edit)
	must(t, err)
	t.Cleanup(setup.Close)
	return &fencingScenario{scenario: s, setup: setup}
}

// hangAll stops the heartbeats of nodes at once (several nodes dying
// together, or, for all of them, a network or API server fault as the
// control plane sees it).
func (s *fencingScenario) hangAll(nodes ...string) {
	s.t.Helper()
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "nodes %s stop heartbeating", strings.Join(nodes, ", "))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = s.w.Partition(s.ctx, n) })
	}
	wg.Wait()
	for _, err := range errs {
		must(s.t, err)
	}
}

// requestEvent is one FencingRequest as a watch event carried it.
type requestEvent struct {
	at       time.Time
	typ      watch.EventType
	name     string
	node     string
	phase    fencingv1alpha1.FencingPhase
	required *metav1.Condition // the Required condition, if set
}

// requestWatch records every change of every FencingRequest, in the order
// the API server made them (one watch, resumed from the last resource
// version it carried), so that a test can replay the phases.
type requestWatch struct {
	mu     sync.Mutex
	events []requestEvent
	err    error // the watch could not be resumed: events may be missing
}

// watchRequests starts recording FencingRequest changes until the test
// ends; phase changes go to the timeline too.
func (s *fencingScenario) watchRequests() *requestWatch {
	s.t.Helper()
	client := s.setup.Client.FencingV1alpha1().FencingRequests()
	list, err := client.List(s.ctx, metav1.ListOptions{})
	must(s.t, err)
	rw := &requestWatch{}
	for i := range list.Items {
		rw.add(s.timeline, watch.Added, &list.Items[i])
	}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					rw.fail(fmt.Errorf("watching FencingRequests from %s: %w", rv, err))
				}
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					w.Stop()
					rw.fail(fmt.Errorf("FencingRequest watch from %s: %w", rv, apierrors.FromObject(ev.Object)))
					return
				}
				r, ok := ev.Object.(*fencingv1alpha1.FencingRequest)
				if !ok {
					continue
				}
				rv = r.ResourceVersion
				if ev.Type != watch.Bookmark {
					rw.add(s.timeline, ev.Type, r)
				}
			}
			w.Stop()
		}
	}()
	return rw
}

func (rw *requestWatch) add(tl *world.Timeline, typ watch.EventType, r *fencingv1alpha1.FencingRequest) {
	e := requestEvent{at: time.Now(), typ: typ, name: r.Name, node: r.Spec.NodeName, phase: r.Status.Phase}
	if c := meta.FindStatusCondition(r.Status.Conditions, fencingv1alpha1.FencingRequestRequired); c != nil {
		e.required = c.DeepCopy()
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var prev *requestEvent
	for i := len(rw.events) - 1; i >= 0; i-- {
		if rw.events[i].name == e.name {
			prev = &rw.events[i]
			break
		}
	}
	if prev == nil || prev.phase != e.phase || typ == watch.Deleted {
		tl.Add(e.at, "FencingRequest %s (%s) %s: phase %q", e.name, e.node, strings.ToLower(string(typ)), e.phase)
	}
	if e.required != nil && (prev == nil || prev.required == nil || prev.required.Reason != e.required.Reason) {
		tl.Add(e.at, "FencingRequest %s (%s): Required=%s %s", e.name, e.node, e.required.Status, e.required.Reason)
	}
	rw.events = append(rw.events, e)
}

func (rw *requestWatch) fail(err error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.err = err
}

// snapshot returns the events so far, and an error if some may be missing.
func (rw *requestWatch) snapshot() ([]requestEvent, error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return slices.Clone(rw.events), rw.err
}

// maxInPhase replays the events and returns the largest number of
// requests that were in phase at once, and the requests at that moment.
func maxInPhase(events []requestEvent, phase fencingv1alpha1.FencingPhase) (int, []string) {
	cur := map[string]fencingv1alpha1.FencingPhase{}
	best, at := 0, []string(nil)
	for _, e := range events {
		if e.typ == watch.Deleted {
			delete(cur, e.name)
		} else {
			cur[e.name] = e.phase
		}
		var in []string
		for name, p := range cur {
			if p == phase {
				in = append(in, name)
			}
		}
		if len(in) > best {
			slices.Sort(in)
			best, at = len(in), in
		}
	}
	return best, at
}

// nodesOf returns, per node, the names of its requests seen in events.
func nodesOf(events []requestEvent) map[string][]string {
	out := map[string][]string{}
	for _, e := range events {
		if !slices.Contains(out[e.node], e.name) {
			out[e.node] = append(out[e.node], e.name)
		}
	}
	return out
}

// TestNodeFencingUnreachableBMCNextLevel: node-a's level-1 device, its
// Redfish BMC, is unreachable; the fence agent's level-1 attempt fails and
// level 2, an IPMI BMC of the same node, powers it off and reads Off back.
// The request is Fenced by level 2 and db-0 fails over with its volume
// fenced first.
func TestNodeFencingUnreachableBMCNextLevel(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.Levels = []fencingv1alpha1.FenceLevel{
			{Index: 1, FenceClassNames: []string{world.FenceClassRedfish}, Timeout: &metav1.Duration{Duration: 15 * time.Second}},
			{Index: 2, FenceClassNames: []string{world.FenceClassIPMI}, Timeout: &metav1.Duration{Duration: 15 * time.Second}},
		}
	})
	fc := s.setup.Client.FencingV1alpha1()
	_, err := fc.FenceClasses().Create(s.ctx, s.w.FenceClass(world.FenceClassIPMI, world.BMCIPMI), metav1.CreateOptions{})
	must(t, err)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	redfish := s.setup.BMCs[nodeA]

	// A second device of node-a: an IPMI BMC with its own Secret, named by
	// a second endpoint of the node's FenceTarget.
	ipmi, err := s.w.StartBMC(s.ctx, nodeA, world.BMCIPMI, world.WithTimeline(s.timeline), world.WithSecretName("bmc-"+nodeA+"-ipmi"))
	must(t, err)
	t.Cleanup(ipmi.Close)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ft, err := fc.FenceTargets().Get(s.ctx, nodeA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ft.Spec.Endpoints = append(ft.Spec.Endpoints, fencingv1alpha1.FenceEndpoint{
			FenceClassName: world.FenceClassIPMI, Address: ipmi.Address, CredentialsSecretRef: ipmi.SecretRef(),
		})
		_, err = fc.FenceTargets().Update(s.ctx, ft, metav1.UpdateOptions{})
		return err
	}))
	must(t, redfish.SetFaults(world.BMCFaults{Unreachable: true}))
	s.timeline.Add(time.Now(), "the Redfish BMC of %s (level 1) is unreachable", nodeA)

	s.hang(nodeA)
	req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	seenFenced := time.Now()
	s.timeline.Add(seenFenced, "FencingRequest %s seen Fenced", req.Name)

	if !slices.ContainsFunc(req.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
		return a.Level == 1 && a.FenceClass == world.FenceClassRedfish && a.EndTime != nil && a.Result != "" && a.Result != fencingv1alpha1.FenceAttemptSucceeded
	}) {
		t.Fatalf("request %s has no ended, unsuccessful level-1 attempt: %+v", req.Name, req.Status.Attempts)
	}
	if slices.ContainsFunc(req.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
		return a.Level == 1 && a.Result == fencingv1alpha1.FenceAttemptSucceeded
	}) {
		t.Fatalf("request %s has a Succeeded level-1 attempt through an unreachable BMC: %+v", req.Name, req.Status.Attempts)
	}
	if !slices.ContainsFunc(req.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
		return a.Level == 2 && a.FenceClass == world.FenceClassIPMI && a.Result == fencingv1alpha1.FenceAttemptSucceeded &&
			a.VerifiedPowerState == string(fencingv1alpha1.PowerStateOff)
	}) {
		t.Fatalf("request %s has no Succeeded level-2 attempt read back Off: %+v", req.Name, req.Status.Attempts)
	}
	if c := meta.FindStatusCondition(req.Status.Conditions, fencingv1alpha1.FencingRequestComplete); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Level2Verified" {
		t.Fatalf("request %s Complete = %+v, want True, Level2Verified", req.Name, c)
	}
	if req.Status.BootIDAtFence == "" {
		t.Fatalf("Fenced request %s recorded no boot ID", req.Name)
	}
	if !ipmi.ReadsOff() || !slices.ContainsFunc(ipmi.PowerCommands(), func(c world.PowerCommand) bool { return c.OK && c.Action == "power down" }) {
		t.Fatalf("the IPMI BMC of %s reads off=%v after commands %+v, want an accepted power down", nodeA, ipmi.ReadsOff(), ipmi.PowerCommands())
	}
	if cmds := redfish.PowerCommands(); len(cmds) != 0 {
		t.Fatalf("the unreachable Redfish BMC of %s received power commands: %+v", nodeA, cmds)
	}
	if errs := append(redfish.Errors(), ipmi.Errors()...); len(errs) != 0 {
		t.Fatalf("power changes of %s failed: %v", nodeA, errs)
	}

	s.assertMovedFenced(nodeA, seenFenced)
	if n := len(mustRequests(t, s, nodeA)); n != 1 {
		t.Fatalf("%d FencingRequests for %s, want exactly 1", n, nodeA)
	}
}

// TestNodeFencingConcurrencyOne: in a world of 5 nodes, two hang together.
// The policy allows one fence at a time (maxConcurrentFencing's default)
// and a rate that does not get in the way; each BMC cuts the power 3 s
// after the power-off, so that the two fences would overlap if admitted
// together. Both nodes end Fenced, and a watch of every request change
// shows that never two requests were in phase Fencing at once.
func TestNodeFencingConcurrencyOne(t *testing.T) {
	t.Parallel()
	const offDelay = 3 * time.Second
	s := newFencingScenarioWith(t, world.Options{Nodes: []string{"node-a", "node-b", "node-c", "node-d", "node-e"}}, world.BMCRedfish, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.StormGuard.Rate = fencingv1alpha1.FenceRate{QPS: new(resource.MustParse("100")), Burst: 5}
	})
	if got := s.setup.Policy.Spec.StormGuard.MaxConcurrentFencing; got != 1 {
		t.Fatalf("FencePolicy maxConcurrentFencing = %d after defaulting, want 1", got)
	}
	hung := []string{"node-a", "node-b"}
	for _, n := range hung {
		must(t, s.setup.BMCs[n].SetFaults(world.BMCFaults{OffDelay: offDelay}))
	}
	rw := s.watchRequests()

	s.hangAll(hung...)
	reqs := map[string]*fencingv1alpha1.FencingRequest{}
	for _, n := range hung {
		r, err := s.setup.WaitRequestPhase(s.ctx, n, fencingv1alpha1.FencingPhaseFenced, 2*fenceTimeout)
		must(t, err)
		reqs[n] = r
	}
	// The watch saw both Fenced before the checks (it may lag the polls).
	var events []requestEvent
	must(t, world.WaitFor(s.ctx, nodeLostTimeout, "the watch to see both requests Fenced", func(context.Context) (bool, error) {
		var err error
		events, err = rw.snapshot()
		if err != nil {
			return false, err
		}
		fenced := 0
		for _, r := range reqs {
			if slices.ContainsFunc(events, func(e requestEvent) bool {
				return e.name == r.Name && e.phase == fencingv1alpha1.FencingPhaseFenced
			}) {
				fenced++
			}
		}
		return fenced == len(reqs), nil
	}))

	if n, at := maxInPhase(events, fencingv1alpha1.FencingPhaseFencing); n != 1 {
		t.Fatalf("%d requests in phase Fencing at once (%v), want at most 1 and at least 1", n, at)
	}
	for n, r := range reqs {
		if !slices.ContainsFunc(events, func(e requestEvent) bool {
			return e.name == r.Name && e.phase == fencingv1alpha1.FencingPhaseFencing
		}) {
			t.Fatalf("the watch never saw request %s of %s in phase Fencing: a phase change went unrecorded", r.Name, n)
		}
		if !slices.ContainsFunc(r.Status.Attempts, func(a fencingv1alpha1.FenceAttempt) bool {
			return a.Result == fencingv1alpha1.FenceAttemptSucceeded && a.VerifiedPowerState == string(fencingv1alpha1.PowerStateOff)
		}) {
			t.Fatalf("Fenced request %s has no Succeeded attempt read back Off: %+v", r.Name, r.Status.Attempts)
		}
	}
	// The limit was exercised: the second request waited for the first.
	if !slices.ContainsFunc(events, func(e requestEvent) bool {
		return e.required != nil && e.required.Status == metav1.ConditionFalse && e.required.Reason == "MaxConcurrentFencing"
	}) {
		t.Fatalf("no request was ever refused with MaxConcurrentFencing: the fences did not contend, the test proves nothing")
	}
	byNode := nodesOf(events)
	for _, n := range s.w.Nodes {
		want := 0
		if slices.Contains(hung, n) {
			want = 1
		}
		if got := len(mustRequests(t, s, n)); got != want || len(byNode[n]) != want {
			t.Fatalf("%s has %d FencingRequests (%d seen by the watch: %v), want %d", n, got, len(byNode[n]), byNode[n], want)
		}
	}
}

// TestNodeFencingFullDisruptionFencesNothing: every node of the world
// stops heartbeating at once, which is how a network or API server fault
// looks from the control plane. Requests may be created and triaged, but
// the storm guard admits none: each is refused with AllZonesFullyDisrupted
// or StormActive, no request reaches Fencing and no BMC receives a
// power-off. When the nodes come back the requests are Cancelled and the
// fencing taints removed.
func TestNodeFencingFullDisruptionFencesNothing(t *testing.T) {
	t.Parallel()
	s := newFencingScenario(t, world.BMCRedfish, nil)
	rw := s.watchRequests()
	refused := []string{"AllZonesFullyDisrupted", "StormActive"}

	s.hangAll(s.w.Nodes...)
	must(t, world.WaitFor(s.ctx, fenceTimeout, "every node's request refused by the storm guard", func(context.Context) (bool, error) {
		events, err := rw.snapshot()
		if err != nil {
			return false, err
		}
		if n, at := maxInPhase(events, fencingv1alpha1.FencingPhaseFencing); n > 0 {
			return false, fmt.Errorf("request %v admitted to Fencing while every node is silent", at)
		}
		for _, n := range s.w.Nodes {
			if !slices.ContainsFunc(events, func(e requestEvent) bool {
				return e.node == n && e.required != nil && e.required.Status == metav1.ConditionFalse && slices.Contains(refused, e.required.Reason)
			}) {
				return false, nil
			}
		}
		return true, nil
	}))
	s.timeline.Add(time.Now(), "every request refused by the storm guard")
	s.assertNoPowerOff()

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "every node heals")
	errs := make([]error, len(s.w.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.w.Nodes {
		wg.Go(func() { errs[i] = s.w.PartitionHeal(s.ctx, n) })
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
	for _, n := range s.w.Nodes {
		must(t, world.WaitFor(s.ctx, nodeLostTimeout, "the request of "+n+" Cancelled, NodeHealthy", func(ctx context.Context) (bool, error) {
			reqs, err := s.setup.FencingRequests(ctx, n)
			if err != nil || len(reqs) != 1 {
				return false, err
			}
			c := meta.FindStatusCondition(reqs[0].Status.Conditions, fencingv1alpha1.FencingRequestTriaged)
			return reqs[0].Status.Phase == fencingv1alpha1.FencingPhaseCancelled && c != nil && c.Reason == "NodeHealthy", nil
		}))
		s.assertUnfenced(n)
	}

	events, err := rw.snapshot()
	must(t, err)
	if n, at := maxInPhase(events, fencingv1alpha1.FencingPhaseFencing); n > 0 {
		t.Fatalf("request %v reached Fencing during a full disruption", at)
	}
	s.assertNoPowerOff()
	byNode := nodesOf(events)
	for _, n := range s.w.Nodes {
		if got := len(mustRequests(t, s, n)); got != 1 || len(byNode[n]) != 1 {
			t.Fatalf("%s has %d FencingRequests (%d seen by the watch: %v), want 1", n, got, len(byNode[n]), byNode[n])
		}
	}
}

// assertNoPowerOff checks that no BMC received a power command and every
// node still reads On.
func (s *fencingScenario) assertNoPowerOff() {
	s.t.Helper()
	for n, b := range s.setup.BMCs {
		if cmds := b.PowerCommands(); len(cmds) != 0 || !b.PoweredOn() {
			s.t.Fatalf("the BMC of %s received %+v and reads on=%v, want no power command", n, cmds, b.PoweredOn())
		}
	}
}
