package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// Deadlines of the automatic story's steps in the demo cluster (Leases of
// 4 s, the test FencePolicy's 5 s leaseStaleAfter); they bound a broken
// run only.
const (
	fenceTimeout    = 90 * time.Second
	failoverTimeout = 2 * time.Minute
	recoverTimeout  = 90 * time.Second
)

// autoRun is one telling of the automatic story and what it measured.
type autoRun struct {
	store  storage
	st     stepper
	dw     *demoWorld
	tl     *world.Timeline
	rw     *requestWatcher
	node   string // the node that loses its heartbeat
	handle string // db-0's volume
	bmc    *world.BMC

	t0        time.Time // the node stops heartbeating
	fenced    *fencingv1alpha1.FencingRequest
	fencedAt  time.Time // the request seen Fenced
	newNode   string
	runningAt time.Time // db-0 Running on newNode
	ev        evidence
	onAt      time.Time // power-on requested through the BMC
	unfenced  time.Time // request Recovered and no fencing taint left
	recovered *fencingv1alpha1.FencingRequest
}

// evidence is what the driver's audit log and the node's stand-in say
// about the fence.
type evidence struct {
	// fence is the index of the fenced unpublish of the volume from the
	// node, publish that of its publish to the new node (-1 when missing).
	fence, publish int
	// powerCut is when the BMC cut the node's power; fencedAt is the
	// earlier of that and the storage fence.
	powerCut, fencedAt time.Time
	// accepted and rejected count the node's writes after fencedAt in the
	// audit log; standinAccepted and standinRejected those the node's
	// stand-in saw answered after the power cut.
	accepted, rejected               int
	standinAccepted, standinRejected int
	check                            invariant.Result
}

// autoStory is the failover with no human: a node stops heartbeating while
// its pod keeps writing; node-fencing detects the stale Lease, the fence
// agent powers the node off through its BMC and reads Off back, the node
// is put out of service, db-0 moves with its volume fenced off the node,
// and once powered on again with a new boot ID the node is unfenced.
func autoStory(ctx context.Context, st stepper, dw *demoWorld, tl *world.Timeline, replicas int, verbose bool, store storage, pin string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	r := &autoRun{st: st, dw: dw, tl: tl, rw: watchFencingRequests(dw.Fencing.Client, tl, stop), store: store}
	victim, handle, err := deployDB(ctx, st, dw.World, tl, replicas, pin, stop)
	if err != nil {
		return err
	}
	r.node, r.handle, r.bmc = victim.Spec.NodeName, handle, dw.Fencing.BMCs[victim.Spec.NodeName]
	for _, step := range []func(context.Context) error{r.hang, r.failover, r.judge, r.recover} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return r.report(ctx, verbose)
}

// hang stops the node's heartbeats while it keeps running and writing.
func (r *autoRun) hang(ctx context.Context) error {
	r.t0 = time.Now()
	r.tl.Add(r.t0, "node %s loses its heartbeat; its pod keeps writing", r.node)
	r.st.printf("%s loses its heartbeat (a hung kubelet, a partition) while db-0 keeps writing; no human acts from here on", r.node)
	if err := r.dw.Partition(ctx, r.node); err != nil {
		return err
	}
	stale := "its leaseStaleAfter"
	if d := r.dw.Fencing.Policy.Spec.Detection.LeaseStaleAfter; d != nil {
		stale = d.Duration.String()
	}
	r.st.printf("node-fencing waits until the Lease of %s is %s old, then the fence agent powers it off through its BMC", r.node, stale)
	return nil
}

// failover waits for the verified fence and for db-0 to run elsewhere.
func (r *autoRun) failover(ctx context.Context) error {
	req, err := r.dw.Fencing.WaitRequestPhase(ctx, r.node, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	if err != nil {
		return fmt.Errorf("the story did not complete: %w", err)
	}
	r.fenced = req
	r.fencedAt = r.seen(req.Name, fencingv1alpha1.FencingPhaseFenced)
	r.st.printf("FencingRequest %s Fenced %.1f s after the heartbeat loss: the BMC read back Off; %s is out of service",
		req.Name, r.fencedAt.Sub(r.t0).Seconds(), r.node)
	moved, err := r.dw.WaitRunning(ctx, demoNamespace, "db-0", r.node, failoverTimeout)
	if err != nil {
		return fmt.Errorf("the story did not complete: %w", err)
	}
	r.runningAt, r.newNode = time.Now(), moved.Spec.NodeName
	r.st.printf("db-0 Running again on %s, its volume attached there", r.newNode)
	return nil
}

// seen returns when the watcher first saw request name in phase p, or now.
func (r *autoRun) seen(name string, p fencingv1alpha1.FencingPhase) time.Time {
	if t, ok := r.rw.phaseSeen(name, p); ok {
		return t
	}
	return time.Now()
}

// judge reads the driver's audit log once the fenced unpublish is there
// and counts the node's writes after the fence.
func (r *autoRun) judge(ctx context.Context) error {
	fenced := []audit.Predicate{audit.Method("ControllerUnpublishVolume"), audit.Volume(r.handle), audit.Node(r.node), audit.Fenced(), audit.OK()}
	var recs []audit.Record
	if err := world.WaitFor(ctx, 20*time.Second, "the fenced unpublish of db-0's volume from "+r.node, func(context.Context) (bool, error) {
		var err error
		recs, err = r.dw.Audit()
		return err == nil && audit.FirstIndex(recs, fenced...) >= 0, nil
	}); err != nil {
		return err
	}
	ev := evidence{
		fence:    audit.FirstIndex(recs, fenced...),
		publish:  audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(r.handle), audit.Node(r.newNode), audit.OK()),
		powerCut: r.fencedAt,
	}
	if t, ok := r.tl.First(fmt.Sprintf("BMC of %s (%s): power cut", r.node, r.bmc.Kind)); ok {
		ev.powerCut = t
	}
	ev.fencedAt = ev.powerCut
	if t := recs[ev.fence].Time; t.Before(ev.fencedAt) {
		ev.fencedAt = t
	}
	after := func(rec audit.Record) bool { return rec.Time.After(ev.fencedAt) }
	ev.accepted = audit.Count(recs, audit.Method("Write"), audit.Node(r.node), after, audit.OK())
	ev.rejected = audit.Count(recs, audit.Method("Write"), audit.Node(r.node), after, audit.Code("PermissionDenied"))
	ev.standinAccepted, ev.standinRejected = kubelet.Accepted(r.dw.NodeWrites(r.node), ev.powerCut)
	ev.check = invariant.Check(recs, invariant.Failover{Volume: r.handle, From: r.node, CutOff: r.t0})
	r.ev = ev
	r.st.printf("audit log: db-0's volume unpublished from %s with fence=true before its publish to %s", r.node, r.newNode)
	return nil
}

// recover powers the node on through its BMC and waits until it is
// unfenced.
func (r *autoRun) recover(ctx context.Context) error {
	dev, err := r.bmc.Device()
	if err != nil {
		return err
	}
	r.st.printf("powering %s on through its BMC; it boots with a new boot ID and its stand-in cleans up as a kubelet does", r.node)
	r.onAt = time.Now()
	r.tl.Add(r.onAt, "power-on of %s requested through its BMC", r.node)
	if err := dev.On(ctx); err != nil {
		return fmt.Errorf("powering %s on: %w", r.node, err)
	}
	rec, err := r.dw.Fencing.WaitRequestPhase(ctx, r.node, fencingv1alpha1.FencingPhaseRecovered, recoverTimeout)
	if err != nil {
		return fmt.Errorf("the node was not unfenced: %w", err)
	}
	r.recovered = rec
	if err := world.WaitFor(ctx, 30*time.Second, r.node+" without Fenceline's taints", func(ctx context.Context) (bool, error) {
		n, err := r.dw.Cluster.Client().CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return slices.Contains(world.FencingTaints, t.Key)
		}), nil
	}); err != nil {
		return err
	}
	r.unfenced = r.seen(rec.Name, fencingv1alpha1.FencingPhaseRecovered)
	r.st.printf("FencingRequest %s Recovered: %s is unfenced", rec.Name, r.node)
	return nil
}

// report prints the timeline and the verdict; a fence that did not hold
// is an error.
func (r *autoRun) report(ctx context.Context, verbose bool) error {
	if recs, err := r.dw.Audit(); err == nil {
		r.tl.AddAudit(recs)
	}
	fmt.Printf("\nTimeline (seconds from the moment %s stopped heartbeating):\n%s\n", r.node, r.tl.Format(r.t0))
	fmt.Printf("%s\n\n", describeRequest(r.recovered))
	ev := r.ev
	fmt.Printf("%s's writes after its verified power-off (+%.2f s): the array accepted %d and refused %d (audit log); the node itself saw %d accepted, %d refused\n",
		r.node, ev.powerCut.Sub(r.t0).Seconds(), ev.accepted, ev.rejected, ev.standinAccepted, ev.standinRejected)
	if err := ev.check.Err(); err != nil {
		fmt.Println(err)
	}
	bytesOK, err := r.store.judgeBytes(ctx, r.dw.World)
	if err != nil {
		return err
	}
	ok := ev.fence >= 0 && ev.publish > ev.fence && ev.accepted == 0 && ev.standinAccepted == 0 &&
		ev.check.Err() == nil && ev.check.NewNode == r.newNode && bytesOK
	verdict := fmt.Sprintf("failover without a human: %.1f s after the heartbeat loss; node %s's writes after the fence: %d accepted, %d rejected",
		r.runningAt.Sub(r.t0).Seconds(), r.node, ev.accepted, ev.rejected)
	if !ok {
		fmt.Printf("FAILED: %s (fenced unpublish at record %d, publish to %s at record %d, stand-in writes accepted after the power-off: %d)\n",
			verdict, ev.fence, r.newNode, ev.publish, ev.standinAccepted)
		return fmt.Errorf("the fence did not hold")
	}
	fmt.Printf("OK: %s\n", verdict)
	fmt.Printf("%s unfenced %.1f s after its power-on\n", r.node, r.unfenced.Sub(r.onAt).Seconds())
	if verbose {
		fmt.Printf("component logs: %s\n", r.dw.Cluster.LogDir())
	}
	return nil
}
