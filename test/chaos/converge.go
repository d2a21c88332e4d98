package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// restore ends every fault and brings the failed nodes back (a heal, or
// power through the BMC or the node), and returns when it began.
func (e *episode) restore() (time.Time, error) {
	at := time.Now()
	e.timeline.Add(at, "restore: faults off, failed nodes back")
	var errs []error
	for _, d := range e.p.Drivers() {
		errs = append(errs, e.w.SetDriverFaultsOf(e.ctx, d))
	}
	e.endLies()
	e.endLatency()
	if e.fencing != nil {
		for _, b := range e.fencing.BMCs {
			errs = append(errs, b.SetFaults(world.BMCFaults{}))
		}
	}
	for _, n := range e.failed {
		// Partitioned is a way of not being Powered: heal it; a node
		// off for real (its power cut, or fenced) boots again.
		switch {
		case e.w.NodePartitioned(n):
			errs = append(errs, e.heal(n))
		case !e.w.NodeUp(n):
			errs = append(errs, e.powerOn(n))
		}
	}
	for _, n := range e.failed {
		errs = append(errs, e.w.Cluster.WaitNodeReady(e.ctx, n, corev1.ConditionTrue, cluster.NodeReadyTimeout))
	}
	return at, errors.Join(errs...)
}

// converge waits until everything has settled after the restore and
// returns how long that took, or what is still unsettled at ConvergeBound.
func (e *episode) converge(restored time.Time) (time.Duration, error) {
	var last error
	offSince := map[string]time.Time{}
	err := world.WaitFor(e.ctx, ConvergeBound, "convergence", func(ctx context.Context) (bool, error) {
		if err := e.bootLateFenced(offSince); err != nil {
			last = err
			return false, nil
		}
		last = e.unsettled(ctx, restored)
		return last == nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("not converged %s after the restore: %w", ConvergeBound, last)
	}
	d := time.Since(restored)
	e.timeline.Add(time.Now(), "converged")
	return d, nil
}

// lateFenceOff is how long a failed node must stay off after the restore
// before the harness boots it: longer than a Reboot fence's off window,
// which the fence agent ends itself.
const lateFenceOff = 5 * time.Second

// bootLateFenced powers on a failed node that a fence admitted before the
// restore powered off after it (a slow BMC carries the admitted Off out
// late, by design: an admitted fence is never abandoned), as the node's
// owner does after any fence. offSince tracks, across polls, since when
// each such node has been seen off.
func (e *episode) bootLateFenced(offSince map[string]time.Time) error {
	for _, n := range e.failed {
		if e.w.NodeUp(n) || e.w.NodePartitioned(n) {
			delete(offSince, n)
			continue
		}
		since, seen := offSince[n]
		switch {
		case !seen:
			offSince[n] = time.Now()
		case time.Since(since) >= lateFenceOff:
			delete(offSince, n)
			e.timeline.Add(time.Now(), "%s powered off after the restore (a fence that landed late)", n)
			if err := e.powerOn(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// unsettled says what is not settled yet, nil when everything is.
func (e *episode) unsettled(ctx context.Context, restored time.Time) error {
	cs := e.w.Cluster.Client()
	var what []string
	for _, s := range e.p.Sets {
		p, err := e.w.RunningPod(ctx, namespace, s.Name+"-0")
		switch {
		case err != nil:
			return err
		case p == nil:
			what = append(what, s.Name+"-0 not Running")
		default:
			if acc, _ := kubelet.Accepted(e.w.NodeWrites(p.Spec.NodeName), restored); acc == 0 {
				what = append(what, fmt.Sprintf("%s-0 on %s not writing", s.Name, p.Spec.NodeName))
			}
		}
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			what = append(what, "pod "+p.Name+" Terminating on "+p.Spec.NodeName)
		}
	}
	vas, err := cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, va := range vas.Items {
		if va.DeletionTimestamp != nil {
			what = append(what, "VolumeAttachment "+va.Name+" being deleted from "+va.Spec.NodeName)
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if readyOf(&n) != corev1.ConditionTrue {
			what = append(what, "node "+n.Name+" not Ready")
		}
		if e.caughtLiar(&n) {
			// Fenced on a lie and caught: it stays fenced on purpose
			// (nothing is unfenced automatically).
			continue
		}
		for _, t := range n.Spec.Taints {
			if strings.HasPrefix(t.Key, names.Domain+"/") || t.Key == names.OutOfServiceTaint {
				what = append(what, fmt.Sprintf("node %s tainted %s", n.Name, t.Key))
			}
		}
	}
	if len(what) > 0 {
		return errors.New(strings.Join(what, "; "))
	}
	return nil
}

// maxConcurrentFencing is the storm guard's limit under the episodes'
// policy: world.TestFencePolicy's, or the API's default of 1.
var maxConcurrentFencing = max(int(world.TestFencePolicy("").Spec.StormGuard.MaxConcurrentFencing), 1)

// facts gathers what Check judges.
func (e *episode) facts() (Facts, error) {
	audits, err := e.w.Audits()
	if err != nil {
		return Facts{}, err
	}
	if err := e.history.Err(); err != nil {
		return Facts{}, fmt.Errorf("the recorded history has a hole: %w", err)
	}
	f := Facts{Audit: audits, SingleWriter: map[Volume]bool{}, NotSafeDetach: map[string]bool{}, Failed: map[string]bool{}, OperatorTaintRemovals: map[string][]uint64{}}
	for _, s := range e.p.Sets {
		if s.Mode == corev1.ReadWriteOnce {
			f.SingleWriter[Volume{s.driver(), e.handles[s.Name]}] = true
		}
		if !e.p.SafeDetachDriver(s.driver()) {
			f.NotSafeDetach[namespace+"/"+s.Name+"-0"] = true
		}
	}
	f.Nodes, f.Deletions = e.history.Snapshot()
	f.UpstreamTaintEviction = !e.p.TaintEviction
	for _, n := range e.failed {
		f.Failed[n] = true
	}
	if e.fencing != nil {
		f.Requests = e.history.Requests()
		f.MaxConcurrentFencing = maxConcurrentFencing
		f.Power = map[string][]world.PowerChange{}
		f.PowerCommands = map[string][]world.PowerCommand{}
		for n, b := range e.fencing.BMCs {
			f.Power[n] = b.PowerLog()
			f.PowerCommands[n] = b.PowerCommands()
		}
	}
	f.Skews = maps.Clone(e.skewed)
	e.mu.Lock()
	f.LyingBMC = maps.Clone(e.lies)
	for n, r := range e.operatorRemovals {
		f.OperatorTaintRemovals[n] = slices.Clone(r)
	}
	e.mu.Unlock()
	return f, nil
}
