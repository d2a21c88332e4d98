package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/realkubelet"
	"fenceline.io/fenceline/test/world"
)

// Bounds of an episode. They are deadlines for a loaded 2-core machine,
// not goals; a workload that has not moved by failoverBound is not a
// violation by itself (storm guard or a stuck BMC may hold it), but it
// must converge within ConvergeBound once the nodes are back.
const (
	episodeTimeout = 5 * time.Minute
	startBound     = 60 * time.Second
	failoverBound  = 60 * time.Second
	// ConvergeBound is how long after the failed nodes are back and the
	// faults have ended everything must be settled: every pod Running on
	// a Ready node and writing, nothing Terminating, no VolumeAttachment
	// being deleted, no node left tainted by Fenceline or out of service.
	ConvergeBound = 90 * time.Second
)

// Result is the outcome of one episode.
type Result struct {
	Plan Plan
	// Findings are the broken invariants; empty when the episode passed.
	Findings []Finding
	// Upstream are what kube-controller-manager did that Fenceline would
	// not (Finding.Upstream); they do not fail the episode.
	Upstream []Finding
	// Restarts counts the components that exited on their own and were
	// restarted, as their Deployment would.
	Restarts int
	// Failover is how long after the failure every set ran again on a
	// surviving node (0 if it had not by failoverBound).
	Failover time.Duration
	// Converged is how long after the restore everything was settled.
	Converged time.Duration
	Duration  time.Duration
	// Judged says how much history the checker read, so that a pass is
	// seen not to be vacuous.
	Judged string
	// Edits is what became of the annotations a third party removed
	// (EditFenceAnnotations); LiesBelieved and LiesCaught count the nodes
	// fenced on a lying BMC's read-back Off, and those node fencing then
	// marked LyingFence.
	Edits                    EditOutcome
	LiesBelieved, LiesCaught int
	// Handovers is what became of the attacher leader fail-overs
	// (AttacherLeaderFailover).
	Handovers AttacherHandovers
	// Bytes is what the byte checker read of a plan on a real target.
	Bytes BytesJudged
}

// episode is one running episode.
type episode struct {
	t        *testing.T
	ctx      context.Context
	p        Plan
	w        *world.World
	fencing  *world.FencingSetup
	history  *History
	timeline *world.Timeline
	handles  map[string]string // set name → volume handle
	failed   []string          // the nodes the failure hits

	// procMu serialises the faults that kill processes with supervise,
	// which restarts those that exit on their own; retired holds the
	// processes killed and replaced on purpose. restarts counts
	// supervise's restarts.
	procMu   sync.Mutex
	retired  map[*cluster.Process]bool
	restarts int

	mu sync.Mutex
	// operatorTainted holds the nodes the operator has put out of
	// service and not yet taken back; operatorRemovals the exact
	// resourceVersions of the operator's removals, by node (an entry,
	// maybe empty, for every node the operator ever tainted).
	operatorTainted  map[string]bool
	operatorRemovals map[string][]uint64
	// lies are the BMCs that lied, by node; edits what became of a third
	// party's edits; findings the violations found while the episode ran
	// (not from the facts).
	lies     map[string]Lie
	edits    EditOutcome
	findings []Finding
	// handovers times the attachers' leader fail-overs; lastLeader is
	// each driver's attacher replica last seen leading (leaderNow).
	handovers  AttacherHandovers
	lastLeader map[string]*cluster.Process

	// skewed holds the skewed nodes' clock offsets; bg the background
	// work Run waits for before it gathers the facts.
	skewed map[string]time.Duration
	skews  []*world.LeaseSkew
	bg     sync.WaitGroup
	// proxies are the API proxies of the APILatency faults and
	// kubeconfigs the kubeconfig files that name them, by component.
	proxies     map[Component]*world.APIProxy
	kubeconfigs map[Component]string
}

const namespace = "chaos"

// Run runs the episode of plan p on a fresh world and checks it. An error
// means the harness could not run it (not a violation).
func Run(t *testing.T, p Plan) (Result, error) {
	start := time.Now()
	res := Result{Plan: p}
	ctx, cancel := context.WithTimeout(context.Background(), episodeTimeout)
	defer cancel()
	e := &episode{t: t, ctx: ctx, p: p, timeline: &world.Timeline{}, handles: map[string]string{},
		operatorTainted: map[string]bool{}, operatorRemovals: map[string][]uint64{}, retired: map[*cluster.Process]bool{},
		lies: map[string]Lie{}, skewed: map[string]time.Duration{}, lastLeader: map[string]*cluster.Process{},
		proxies: map[Component]*world.APIProxy{}, kubeconfigs: map[Component]string{}}
	if err := e.setUp(); err != nil {
		return res, fmt.Errorf("setting up: %w", err)
	}
	stopSupervisor := make(chan struct{})
	defer close(stopSupervisor)
	go e.supervise(stopSupervisor)
	t0 := time.Now()
	e.timeline.Add(t0, "failure %s begins", p.Failure)
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- e.injectFaults(t0) }()
	failureDone := make(chan error, 1)
	go func() { failureDone <- e.fail(t0) }()
	stopOperator := make(chan struct{})
	operatorDone := make(chan error, 1)
	if p.Recovery == Operator {
		go func() { operatorDone <- e.operate(stopOperator) }()
	} else {
		close(operatorDone)
	}
	var failureErr error
	failureOver := make(chan struct{})
	go func() { failureErr = <-failureDone; close(failureOver) }()
	if d, ok := e.waitFailover(t0, failureOver); ok {
		res.Failover = d
	}
	<-failureOver
	var errs []error
	errs = append(errs, failureErr, <-faultsDone)
	restored, err := e.restore()
	errs = append(errs, err)
	conv, convErr := e.converge(restored)
	close(stopOperator)
	errs = append(errs, <-operatorDone)
	e.bg.Wait()
	res.Converged = conv
	if convErr != nil {
		res.Findings = append(res.Findings, Finding{Rule: "convergence", Detail: convErr.Error()})
	}
	facts, err := e.facts()
	if err != nil {
		return res, err
	}
	e.mu.Lock()
	res.Findings = append(res.Findings, e.findings...)
	res.Edits = e.edits
	res.Handovers = e.handovers
	e.mu.Unlock()
	res.LiesBelieved, res.LiesCaught = lieOutcome(facts)
	for _, f := range Check(facts) {
		if f.Upstream {
			res.Upstream = append(res.Upstream, f)
		} else {
			res.Findings = append(res.Findings, f)
		}
	}
	bytesJudged := ""
	if p.Tgt != "" {
		var fs []Finding
		fs, res.Bytes, bytesJudged = e.checkBytes(convErr == nil)
		res.Findings = append(res.Findings, fs...)
	}
	res.Judged = facts.Judged() + bytesJudged
	if len(e.skews) > 0 {
		res.Judged += fmt.Sprintf(", %d renewals rewritten with a skewed clock", e.skewRewrites())
	}
	for c, p := range e.proxies {
		res.Judged += fmt.Sprintf(", %d connections of the %s through its API proxy", p.Served(), c)
	}
	res.Judged += res.Handovers.judged()
	res.Restarts = e.restarts
	res.Duration = time.Since(start)
	if len(res.Findings) > 0 {
		e.addAudits(facts.Audit)
		t.Logf("timeline of %s (seconds from the failure):\n%s", p, e.timeline.Format(t0))
	}
	return res, errors.Join(errs...)
}

// setUp starts the world and the workload and picks the failed nodes.
func (e *episode) setUp() error {
	nodes := make([]string, Nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%c", 'a'+i)
	}
	opts := world.Options{
		Nodes:              nodes,
		ZombieWrites:       true,
		WriteInterval:      100 * time.Millisecond,
		Fencing:            e.p.Recovery == NodeFencing,
		ControllerReplicas: e.p.Replicas,
		AttacherReplicas:   e.p.AttacherReplicas,
		TaintEviction:      e.p.TaintEviction,
		Driver:             world.DriverOptions{SafeDetach: e.p.SafeDetachDriver(world.DriverName)},
		NetworkFence:       e.p.NetworkFence,
	}
	if e.p.Tgt != "" {
		iscsi.RequireTgt(e.t)
		opts.Driver = world.TgtDriver(e.p.Tgt, opts.Driver)
	}
	if e.p.RealKubelet {
		realkubelet.Require(e.t)
		opts.Nodes, opts.RealKubelets = nodes[:Nodes-1], []string{RealNode}
	}
	if e.p.TwoDrivers {
		opts.SecondDriver = &world.DriverOptions{SafeDetach: e.p.SafeDetachDriver(world.SecondDriverName)}
	}
	if e.p.UpstreamAttacher {
		upstream, err := cluster.Tool("csi-attacher")
		if err != nil {
			return err
		}
		opts.AttacherPath = upstream
	}
	e.w = world.Start(e.t, opts)
	stop := make(chan struct{})
	e.t.Cleanup(func() { close(stop) })
	record, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	history, err := Record(record, e.w.Cluster)
	if err != nil {
		return err
	}
	e.history = history
	if err := e.setUpProxies(); err != nil {
		return err
	}
	if err := e.w.CreateNamespace(e.ctx, namespace); err != nil {
		return err
	}
	e.timeline.Watch(e.w.Cluster.Client(), namespace, stop)
	if e.p.Recovery == NodeFencing {
		kind := world.BMCRedfish
		if e.p.IPMI {
			kind = world.BMCIPMI
		}
		var edit func(*fencingv1alpha1.FencePolicy)
		if e.p.NetworkFence {
			edit = func(p *fencingv1alpha1.FencePolicy) {
				p.Spec.StorageFenceMethods = []fencingv1alpha1.StorageFenceMethod{{Method: fencingv1alpha1.StorageFenceNetworkFence,
					NetworkFence: &fencingv1alpha1.NetworkFenceMethod{NetworkFenceClassName: world.NetworkFenceClassName}}}
			}
		}
		setup, err := e.w.SetUpFencing(e.ctx, kind, e.timeline, edit)
		if err != nil {
			return err
		}
		e.t.Cleanup(setup.Close)
		e.fencing = setup
		if err := e.history.RecordFencing(record, e.w.Cluster); err != nil {
			return err
		}
	}
	if err := e.w.CreateStorageClass(e.ctx); err != nil {
		return err
	}
	uncordon := func(context.Context) error { return nil }
	if e.p.RealKubelet {
		// The workload starts on the real kubelet, the node that fails.
		var err error
		if uncordon, err = e.w.OnlyOn(e.ctx, RealNode); err != nil {
			return err
		}
	}
	if err := e.createSets(); err != nil {
		return err
	}
	var on []string
	for _, s := range e.p.Sets {
		pod, err := e.w.WaitRunning(e.ctx, namespace, s.Name+"-0", "", startBound)
		if err != nil {
			return err
		}
		if err := e.waitWrite(pod.Spec.NodeName, time.Time{}, startBound); err != nil {
			return err
		}
		on = append(on, pod.Spec.NodeName)
	}
	if err := uncordon(e.ctx); err != nil {
		return err
	}
	if e.p.Replicas > 1 {
		if _, err := e.w.LeadingController(e.ctx, startBound); err != nil {
			return err
		}
	} else if err := e.w.ControllerRunning(e.ctx, startBound); err != nil {
		return err
	}
	if e.p.AttacherReplicas > 1 {
		for _, d := range e.p.Drivers() {
			if _, err := e.w.LeadingAttacherOf(e.ctx, d, startBound); err != nil {
				return err
			}
		}
	}
	e.failed = []string{on[0]}
	if e.p.Failure == TwoNodes {
		second := ""
		for _, n := range append(on[1:], e.w.AllNodes()...) {
			if n != on[0] {
				second = n
				break
			}
		}
		e.failed = append(e.failed, second)
	}
	e.timeline.Add(time.Now(), "workload running on %v; failing %v", on, e.failed)
	if err := e.startSkews(on); err != nil {
		return err
	}
	if e.p.LyingBMC {
		return e.lie()
	}
	return nil
}

// waitWrite waits for an accepted write from node's stand-in after after.
func (e *episode) waitWrite(node string, after time.Time, timeout time.Duration) error {
	return world.WaitFor(e.ctx, timeout, "an accepted write from "+node, func(context.Context) (bool, error) {
		acc, _ := kubelet.Accepted(e.w.NodeWrites(node), after)
		return acc > 0, nil
	})
}

// waitFailover waits until every set the recovery moves (Plan.Moves) runs
// on a node the failure did not hit, and returns how long that took. It
// also returns, without a failover, once the failure is over (a healed
// partition, a booted node) and every such set runs again wherever it is.
// The sets the recovery leaves on a failed node (a driver that is not
// safe-detach under quarantine) are waited for by the convergence, after
// the restore.
func (e *episode) waitFailover(t0 time.Time, failureOver <-chan struct{}) (time.Duration, bool) {
	if !slices.ContainsFunc(e.p.Sets, e.p.Moves) {
		e.timeline.Add(time.Now(), "no set the recovery moves: the workload stays until the restore")
		return 0, false
	}
	moved := false
	err := world.WaitFor(e.ctx, failoverBound, "the workload running on surviving nodes", func(ctx context.Context) (bool, error) {
		over := false
		select {
		case <-failureOver:
			over = e.p.Failure != PowerLoss && e.p.Failure != TwoNodes
		default:
		}
		moved = true
		for _, s := range e.p.Sets {
			if !e.p.Moves(s) {
				continue
			}
			p, err := e.w.RunningPod(ctx, namespace, s.Name+"-0")
			if err != nil || p == nil {
				return false, nil //nolint:nilerr // keep polling until the deadline
			}
			if slices.Contains(e.failed, p.Spec.NodeName) {
				if !over || !e.w.NodeUp(p.Spec.NodeName) {
					return false, nil
				}
				moved = false
			}
		}
		return true, nil
	})
	if err != nil {
		e.timeline.Add(time.Now(), "workload not moved within %s", failoverBound)
		return 0, false
	}
	if !moved {
		e.timeline.Add(time.Now(), "the failure ended before the workload moved")
		return 0, false
	}
	d := time.Since(t0)
	e.timeline.Add(time.Now(), "workload running on surviving nodes")
	return d, true
}

// sleepUntil waits until t or the episode's end.
func (e *episode) sleepUntil(t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
}

// bmc returns node's BMC, nil without node fencing.
func (e *episode) bmc(node string) *world.BMC {
	if e.fencing == nil {
		return nil
	}
	return e.fencing.BMCs[node]
}

// powerOff cuts node's power: through its BMC's rail when it has one, so
// that the BMC reads Off as after a real power failure.
func (e *episode) powerOff(node string) error {
	e.timeline.Add(time.Now(), "power loss on %s", node)
	return e.retry("power loss on "+node, func() error {
		if b := e.bmc(node); b != nil {
			return b.PowerLoss(e.ctx)
		}
		return e.w.PowerOff(e.ctx, node)
	})
}

// harnessRetry bounds the retries of one action of the harness.
const harnessRetry = time.Minute

// retry runs an action of the harness (each is idempotent) until it
// succeeds: it writes to the API server, which a fault may be restarting.
func (e *episode) retry(what string, action func() error) error {
	var last error
	err := world.WaitFor(e.ctx, harnessRetry, what, func(context.Context) (bool, error) {
		last = action()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last error: %v)", err, last)
	}
	return nil
}

// powerOn boots node again.
func (e *episode) powerOn(node string) error {
	e.timeline.Add(time.Now(), "power back on %s", node)
	return e.retry("power on "+node, func() error {
		if b := e.bmc(node); b != nil {
			return b.PowerRestore(e.ctx)
		}
		return e.w.PowerOn(e.ctx, node)
	})
}

// heal ends node's partition unless it was powered off meanwhile (a
// fence): then only a power-on brings it back, at the restore.
func (e *episode) heal(node string) error {
	if !e.w.NodePartitioned(node) {
		return nil
	}
	e.timeline.Add(time.Now(), "partition of %s heals", node)
	return e.retry("healing the partition of "+node, func() error {
		if !e.w.NodePartitioned(node) {
			return nil // a fence powered it off meanwhile: only a power-on brings it back
		}
		return e.w.PartitionHeal(e.ctx, node)
	})
}

func (e *episode) partition(node string) error {
	e.timeline.Add(time.Now(), "partition cuts %s off", node)
	return e.retry("partitioning "+node, func() error { return e.w.Partition(e.ctx, node) })
}

// fail injects the plan's failure from t0.
func (e *episode) fail(t0 time.Time) error {
	node := e.failed[0]
	switch e.p.Failure {
	case PowerLoss:
		return e.powerOff(node)
	case TwoNodes:
		return errors.Join(e.powerOff(e.failed[0]), e.powerOff(e.failed[1]))
	case PartitionHeals:
		if err := e.partition(node); err != nil {
			return err
		}
		if err := e.sleepUntil(t0.Add(e.p.HealAfter)); err != nil {
			return err
		}
		return e.heal(node)
	case PowerCycle:
		if err := e.powerOff(node); err != nil {
			return err
		}
		if err := e.sleepUntil(t0.Add(e.p.HealAfter)); err != nil {
			return err
		}
		if e.w.NodeUp(node) || e.w.NodePartitioned(node) {
			return nil
		}
		return e.powerOn(node)
	case Flapping:
		for range e.p.Flaps {
			if err := e.partition(node); err != nil {
				return err
			}
			if err := e.sleepUntil(time.Now().Add(flapDown)); err != nil {
				return err
			}
			if err := e.heal(node); err != nil {
				return err
			}
			if err := e.sleepUntil(time.Now().Add(flapUp)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown failure %q", e.p.Failure)
}

// How long a flapping node stays cut off, and then back: just past the
// control plane's 5 s node-monitor grace period, so that each flap is
// seen as a lost node and then as one that came back mid-action.
const (
	flapDown = 6 * time.Second
	flapUp   = 3 * time.Second
)

func readyOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
