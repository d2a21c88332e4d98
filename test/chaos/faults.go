package chaos

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/test/world"
)

// driverLatency is how long DriverLatency delays a call: past the
// attacher's 10 s timeout, so that the call is retried while the first
// one is still being carried out.
const driverLatency = 12 * time.Second

// injectFaults runs the plan's faults at their moments from t0, each
// after the previous one returned. Lasting faults end before it returns.
func (e *episode) injectFaults(t0 time.Time) error {
	var errs []error
	for _, f := range e.p.Faults {
		if err := e.sleepUntil(t0.Add(f.At)); err != nil {
			return err
		}
		e.timeline.Add(time.Now(), "fault: %s", f)
		if err := e.inject(f); err != nil {
			errs = append(errs, fmt.Errorf("fault %s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

func (e *episode) inject(f Fault) error {
	switch f.Kind {
	case BMCLatency, BMCUnreachable, PauseController, AttacherDown, APILatency:
		return e.injectLasting(f)
	case EditFenceAnnotations:
		e.startEdit()
		return nil
	case AttacherLeaderFailover:
		return e.attacherFailover(f.driver()) // takes procMu itself, once it found the leader
	}
	// The others are quick; the kills among them hold procMu so that
	// supervise never restarts a process the fault is replacing.
	e.procMu.Lock()
	defer e.procMu.Unlock()
	w := e.w
	switch f.Kind {
	case KillAttacher:
		e.retired[w.AttacherOf(f.driver())] = true
		return w.KillAttacherOf(e.ctx, f.driver())
	case KillController:
		e.retired[w.Controller] = true
		defer e.repointController()
		return w.KillController(e.ctx)
	case LeaderFailover:
		leader, err := w.LeadingController(e.ctx, 30*time.Second)
		if err != nil {
			return err
		}
		e.retired[leader] = true
		leader.Kill()
		defer e.repointController()
		_, err = w.StartControllerReplica(e.ctx)
		return err
	case KillFenceAgent:
		e.retired[w.FenceAgent] = true
		return w.KillFenceAgent(e.ctx)
	case KillDriver:
		return w.KillDriverOf(e.ctx, f.driver())
	case KillControllerManager:
		return w.Cluster.KillControllerManager(e.ctx)
	case KillAPIServer:
		return w.Cluster.KillAPIServer(e.ctx)
	case DriverErrors:
		return w.SetDriverFaultsOf(e.ctx, f.driver(), faults.FailNext("ControllerUnpublishVolume", f.N, codes.Unavailable))
	case DriverLatency:
		return w.SetDriverFaultsOf(e.ctx, f.driver(), faults.DelayNext("ControllerUnpublishVolume", f.N, driverLatency),
			faults.DelayNext("ControllerPublishVolume", f.N, driverLatency))
	case DriverLostAnswers:
		return w.SetDriverFaultsOf(e.ctx, f.driver(), faults.LoseAnswers("ControllerUnpublishVolume", f.N))
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// injectLasting injects the faults that last (and need no procMu).
func (e *episode) injectLasting(f Fault) error {
	switch f.Kind {
	case BMCLatency:
		return e.bmcFault(f.For, e.fencing.BMCs, world.BMCFaults{Latency: 2 * time.Second})
	case BMCUnreachable:
		return e.bmcFault(f.For, map[string]*world.BMC{e.failed[0]: e.bmc(e.failed[0])}, world.BMCFaults{Unreachable: true})
	case PauseController:
		return e.pauseController(f.For)
	case AttacherDown:
		return e.attacherDown(f.driver(), f.For)
	case APILatency:
		return e.apiLatency(f)
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// attacherDown kills driver's fenceline-attacher (every replica) and
// starts it again d later: it is retired meanwhile, so that supervise
// does not restart it sooner.
func (e *episode) attacherDown(driver string, d time.Duration) error {
	e.procMu.Lock()
	e.retireAttachers(driver)
	err := e.w.StopAttacherOf(driver)
	e.procMu.Unlock()
	if err != nil {
		return err
	}
	waitErr := e.sleepUntil(time.Now().Add(d))
	e.procMu.Lock()
	defer e.procMu.Unlock()
	return errors.Join(waitErr, e.w.StartAttacherOf(driver))
}

// bmcFault puts faults on bmcs for d, then makes them honest again, but
// for a lie (Plan.LyingBMC), which lasts until the restore.
func (e *episode) bmcFault(d time.Duration, bmcs map[string]*world.BMC, f world.BMCFaults) error {
	var errs []error
	for n, b := range bmcs {
		errs = append(errs, b.SetFaults(e.withLie(n, f)))
	}
	if err := e.sleepUntil(time.Now().Add(d)); err != nil {
		return err
	}
	for n, b := range bmcs {
		errs = append(errs, b.SetFaults(e.withLie(n, world.BMCFaults{})))
	}
	return errors.Join(errs...)
}

// pauseController stops every fenceline-controller replica (SIGSTOP to its
// process group) for d: its watches and leases fall behind, then it
// resumes with what it had.
func (e *episode) pauseController(d time.Duration) error {
	var paused []int
	e.procMu.Lock()
	for _, p := range e.w.Controllers {
		if exited, _ := p.Exited(); !exited {
			if err := syscall.Kill(-p.PID(), syscall.SIGSTOP); err == nil {
				paused = append(paused, p.PID())
			}
		}
	}
	e.procMu.Unlock()
	err := e.sleepUntil(time.Now().Add(d))
	for _, pid := range paused {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	}
	return err
}

// lie makes the failed node's BMC the worst liar until the restore: it
// accepts a power-off, leaves the node running and reads Off. The lie is
// recorded before it begins, so that no read-back of it comes earlier.
func (e *episode) lie() error {
	node := e.failed[0]
	b := e.bmc(node)
	if b == nil {
		return fmt.Errorf("a lying BMC without node fencing")
	}
	e.mu.Lock()
	if _, ok := e.lies[node]; !ok {
		e.lies[node] = Lie{From: time.Now()}
	}
	e.mu.Unlock()
	e.timeline.Add(time.Now(), "BMC of %s lies from now to the restore: accepts a power-off, leaves the node on, reads Off", node)
	return b.SetFaults(e.withLie(node, world.BMCFaults{}))
}

// withLie adds the lie to f while node's BMC lies, so that a passing BMC
// fault does not end it.
func (e *episode) withLie(node string, f world.BMCFaults) world.BMCFaults {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l, ok := e.lies[node]; ok && l.Until.IsZero() {
		f.StaysOn, f.ReadsOff = true, true
	}
	return f
}

// endLies ends every lie, at the restore (the BMCs' faults are cleared
// right after).
func (e *episode) endLies() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n, l := range e.lies {
		if l.Until.IsZero() {
			l.Until = time.Now()
			e.lies[n] = l
			e.timeline.Add(l.Until, "BMC of %s honest again", n)
		}
	}
}
