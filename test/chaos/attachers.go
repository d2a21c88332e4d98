package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// Bounds of an attacher leader fail-over (AttacherLeaderFailover).
const (
	// attacherLeaderSearch is how long the fault looks for the leading
	// replica to kill (a restart of kube-apiserver or of the replicas may
	// leave none for a while).
	attacherLeaderSearch = 30 * time.Second
	// attacherTakeoverBound is how long the harness watches for a
	// successor to take the Lease: the killed leader's Lease expires
	// after world.AttacherLeaseDuration; the rest is headroom for the
	// other faults. A successor later than that is counted, not judged:
	// what matters is that every detach finishes as decided, which the
	// invariants and the convergence judge.
	attacherTakeoverBound = 60 * time.Second
)

// AttacherHandovers is what became of an episode's attacher leader
// fail-overs.
type AttacherHandovers struct {
	// TakenOver holds, for each fail-over whose successor took the Lease
	// within attacherTakeoverBound, how long after the kill it did.
	TakenOver []time.Duration
	// Missed counts those whose successor did not within the bound.
	Missed int
}

// judged is what the episode's report adds on its attacher fail-overs.
func (h AttacherHandovers) judged() string {
	if len(h.TakenOver) == 0 && h.Missed == 0 {
		return ""
	}
	took := make([]string, 0, len(h.TakenOver))
	for _, d := range h.TakenOver {
		took = append(took, fmt.Sprintf("%.1fs", d.Seconds()))
	}
	return fmt.Sprintf(", attacher Lease taken over after %s (%d not within %s)", strings.Join(took, ", "), h.Missed, attacherTakeoverBound)
}

// attacherFailover kills the replica of driver's attacher that leads and
// starts it again at once (a new process, a new identity), as a
// Deployment replaces a killed pod; then, in the background, it times the
// hand-over to whichever replica takes the Lease next.
func (e *episode) attacherFailover(driver string) error {
	deadline := time.Now().Add(attacherLeaderSearch)
	for {
		leader, err := e.leadingAttacher(driver, time.Until(deadline))
		if err != nil {
			return err
		}
		e.procMu.Lock()
		current := slices.Contains(e.w.AttacherProcessesOf(driver), leader)
		if exited, _ := leader.Exited(); !current || exited {
			// It exited on its own (or was replaced) since it was seen
			// leading: look for the leader again.
			e.procMu.Unlock()
			continue
		}
		e.retired[leader] = true
		killed := time.Now()
		next, err := e.w.KillAttacherReplica(leader)
		e.procMu.Unlock()
		if err != nil {
			return err
		}
		e.timeline.Add(killed, "killed the leading %s (SIGKILL, Lease not released); its replacement starts as a standby", leader.Name)
		e.bg.Go(func() { e.timeTakeover(driver, killed, next) })
		return nil
	}
}

// timeTakeover waits for a running replica to hold the Lease of driver's
// attacher after the leader was killed at killed, and records how long it
// took.
func (e *episode) timeTakeover(driver string, killed time.Time, replacement *cluster.Process) {
	leader, err := e.leadingAttacher(driver, attacherTakeoverBound)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.handovers.Missed++
		e.timeline.Add(time.Now(), "no fenceline-attacher replica took the Lease over within %s of the kill", attacherTakeoverBound)
		return
	}
	d := time.Since(killed)
	e.handovers.TakenOver = append(e.handovers.TakenOver, d)
	who := "the standby"
	if leader == replacement {
		who = "the killed leader's replacement"
	}
	e.timeline.Add(time.Now(), "%s, %s, took the attacher's Lease over %.1fs after the kill", leader.Name, who, d.Seconds())
}

// leadingAttacher waits up to timeout for a running replica of driver's
// fenceline-attacher that holds its leader Lease. It reads the replicas
// under procMu but waits without it, so that supervise restarts replicas
// meanwhile.
func (e *episode) leadingAttacher(driver string, timeout time.Duration) (*cluster.Process, error) {
	var leader *cluster.Process
	var last error
	err := world.WaitFor(e.ctx, timeout, "a leading fenceline-attacher replica of "+driver, func(ctx context.Context) (bool, error) {
		leader, last = e.w.AttacherLeaderOf(ctx, driver, e.attacherProcesses(driver))
		return leader != nil, nil
	})
	if err != nil && last != nil {
		return nil, fmt.Errorf("%w (last error: %w)", err, last)
	}
	return leader, err
}

// attacherProcesses returns the current processes of driver's attacher,
// read under procMu.
func (e *episode) attacherProcesses(driver string) []*cluster.Process {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	return e.w.AttacherProcessesOf(driver)
}

// leaderNow returns the replica of driver's attacher that leads now, nil
// when none does. An error reading the Lease (a restarting API server)
// keeps the leader seen last if it still runs, so that a poll does not
// take a moment without an answer for a hand-over.
func (e *episode) leaderNow(driver string) *cluster.Process {
	procs := e.attacherProcesses(driver)
	leader, err := e.w.AttacherLeaderOf(e.ctx, driver, procs)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		leader = e.lastLeader[driver]
		if leader == nil || !slices.Contains(procs, leader) {
			return nil
		}
		if exited, _ := leader.Exited(); exited {
			return nil
		}
	}
	e.lastLeader[driver] = leader
	return leader
}

// retireAttachers marks every process of driver's attacher killed on
// purpose, so that supervise leaves its restart to the fault. Callers
// hold procMu.
func (e *episode) retireAttachers(driver string) {
	for _, p := range e.w.AttacherProcessesOf(driver) {
		e.retired[p] = true
	}
}

// superviseAttachers restarts every attacher process that exited on its
// own (supervise; callers hold procMu).
func (e *episode) superviseAttachers() {
	for _, p := range e.w.AttacherProcesses() {
		if next := e.restartIfExited(p); next != p {
			e.w.AttacherRestarted(p, next)
		}
	}
}

// handoverSummary is the summary's line on attacher replicas, empty when no
// episode ran two: how many episodes did, how many leaders were killed,
// and how long their successors took to take the Lease.
func handoverSummary(results []Result) string {
	episodes, failovers := 0, 0
	var took []time.Duration
	missed := 0
	for _, r := range results {
		if r.Plan.AttacherReplicas < 2 {
			continue
		}
		episodes++
		for _, f := range r.Plan.Faults {
			if f.Kind == AttacherLeaderFailover {
				failovers++
			}
		}
		took = append(took, r.Handovers.TakenOver...)
		missed += r.Handovers.Missed
	}
	if episodes == 0 {
		return ""
	}
	return fmt.Sprintf("  attacher replicas: %d episodes with two, %d leader fail-overs: taken over in %d (median %s, max %s), not within %s in %d\n",
		episodes, failovers, len(took), median(took), maxOf(took), attacherTakeoverBound, missed)
}
