package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// manualRun is one telling of the manual story and what it measured.
type manualRun struct {
	st     stepper
	store  storage
	w      *world.World
	tl     *world.Timeline
	node   string // the node powered off
	handle string // db-0's volume

	t0, taintAt, runningAt time.Time
	newNode                string
	// fence and publish are the audit indices of the fenced unpublish from
	// the node and of the publish to newNode; accepted and rejected count
	// the node's writes after the fence.
	fence, publish     int
	accepted, rejected int
	recs               []audit.Record
}

// manualStory is scenario 1 (KEP-2268 non-graceful shutdown with
// Fenceline), narrated: a node is powered off while its pod keeps writing
// (a zombie), an operator applies the out-of-service taint, db-0 moves with
// its volume fenced, and the node is powered on and the taint removed.
func manualStory(ctx context.Context, st stepper, w *world.World, replicas int, verbose bool, store storage, pin string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	r := &manualRun{st: st, w: w, tl: &world.Timeline{}, store: store}
	stop := make(chan struct{})
	defer close(stop)
	victim, handle, err := deployDB(ctx, st, w, r.tl, replicas, pin, stop)
	if err != nil {
		return err
	}
	r.node, r.handle = victim.Spec.NodeName, handle
	for _, step := range []func(context.Context) error{r.powerOffAndTaint, r.judge, r.recover} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return r.report(ctx, verbose)
}

// powerOffAndTaint powers the node off, has the operator taint it once it
// is NotReady, and waits for db-0 to run elsewhere.
func (r *manualRun) powerOffAndTaint(ctx context.Context) error {
	r.t0 = time.Now()
	r.tl.Add(r.t0, "node %s powered off (its pod keeps writing to storage: a zombie)", r.node)
	r.st.printf("powering off %s (the stand-in keeps writing, as a partitioned node would)", r.node)
	if err := r.w.PowerOff(ctx, r.node); err != nil {
		return err
	}
	if err := r.w.Cluster.WaitNodeReady(ctx, r.node, corev1.ConditionUnknown, 30*time.Second); err != nil {
		return err
	}
	r.st.printf("%s is NotReady; an operator confirms it is off and applies the out-of-service taint", r.node)
	r.taintAt = time.Now()
	if err := r.w.AddTaint(ctx, r.node, world.OutOfServiceTaint); err != nil {
		return err
	}
	r.tl.Add(r.taintAt, "operator: out-of-service taint on %s", r.node)
	moved, err := r.w.WaitRunning(ctx, demoNamespace, "db-0", r.node, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("the story did not complete: %w", err)
	}
	r.runningAt, r.newNode = time.Now(), moved.Spec.NodeName
	r.st.printf("db-0 Running again on %s", r.newNode)
	return nil
}

// judge waits until a few of the zombie's writes after the fenced
// unpublish were answered and counts those accepted and refused: as the array's audit log records
// them, or, on a real iSCSI target, as the node's own session saw them
// answered (the target keeps no such log).
func (r *manualRun) judge(ctx context.Context) error {
	fenced := []audit.Predicate{audit.Method("ControllerUnpublishVolume"), audit.Volume(r.handle), audit.Node(r.node), audit.Fenced(), audit.OK()}
	if err := world.WaitFor(ctx, 20*time.Second, "writes of "+r.node+" after the fence", func(context.Context) (bool, error) {
		recs, err := r.w.Audit()
		if err != nil {
			return false, nil //nolint:nilerr // retry reading
		}
		r.recs = recs
		r.fence = audit.FirstIndex(recs, fenced...)
		if r.fence < 0 {
			return false, nil
		}
		r.accepted, r.rejected = r.zombieWrites()
		return r.accepted+r.rejected >= 3, nil
	}); err != nil {
		return err
	}
	r.publish = audit.FirstIndex(r.recs, audit.Method("ControllerPublishVolume"), audit.Volume(r.handle), audit.Node(r.newNode), audit.OK())
	return nil
}

// zombieWrites counts the node's writes after the fence, accepted and
// refused.
func (r *manualRun) zombieWrites() (accepted, rejected int) {
	if r.store.real() {
		return kubelet.SentAfter(r.w.NodeWrites(r.node), r.recs[r.fence].Time)
	}
	after := r.recs[r.fence+1:]
	return audit.Count(after, audit.Method("Write"), audit.Node(r.node), audit.OK()),
		audit.Count(after, audit.Method("Write"), audit.Node(r.node), audit.Code("PermissionDenied"))
}

// recover powers the node on, waits for its clean-up (which lifts the
// fence) and has the operator remove the taint.
func (r *manualRun) recover(ctx context.Context) error {
	r.st.printf("powering %s back on (new boot ID); its stand-in cleans up as a kubelet does, which lifts the fence", r.node)
	if err := r.w.PowerOn(ctx, r.node); err != nil {
		return err
	}
	if err := world.WaitFor(ctx, 60*time.Second, "clean-up on "+r.node, func(context.Context) (bool, error) {
		recs, err := r.w.Audit()
		return err == nil && audit.Count(recs, audit.Method("NodeUnstageVolume"), audit.Node(r.node), audit.Volume(r.handle), audit.OK()) > 0, nil
	}); err != nil {
		return err
	}
	if err := r.w.RemoveTaint(ctx, r.node, world.OutOfServiceTaint.Key); err != nil {
		return err
	}
	r.tl.Add(time.Now(), "operator: out-of-service taint removed from %s", r.node)
	if recs, err := r.w.Audit(); err == nil {
		r.recs = recs
		r.tl.AddAudit(recs)
	}
	return nil
}

// report prints the timeline and the verdict; a fence that did not hold
// is an error.
func (r *manualRun) report(ctx context.Context, verbose bool) error {
	fmt.Printf("\nTimeline (seconds from the power-off of %s):\n%s\n", r.node, r.tl.Format(r.t0))
	check := invariant.Check(r.recs, invariant.Failover{Volume: r.handle, From: r.node, CutOff: r.t0})
	if err := check.Err(); err != nil {
		fmt.Println(err)
	}
	bytesOK, err := r.store.judgeBytes(ctx, r.w)
	if err != nil {
		return err
	}
	ok := r.fence >= 0 && r.publish > r.fence && r.accepted == 0 && check.Err() == nil && check.NewNode == r.newNode && bytesOK
	verdict := fmt.Sprintf("failover %.1f s after the taint (%.1f s after the power-off); node %s's writes after the fence: %d accepted, %d rejected",
		r.runningAt.Sub(r.taintAt).Seconds(), r.runningAt.Sub(r.t0).Seconds(), r.node, r.accepted, r.rejected)
	if !ok {
		fmt.Printf("FAILED: %s (fenced unpublish at record %d, publish to %s at record %d)\n", verdict, r.fence, r.newNode, r.publish)
		return fmt.Errorf("the fence did not hold")
	}
	fmt.Printf("OK: %s\n", verdict)
	if verbose {
		fmt.Printf("component logs: %s\n", r.w.Cluster.LogDir())
	}
	return nil
}
