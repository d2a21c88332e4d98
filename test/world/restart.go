package world

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"fenceline.io/fenceline/test/cluster"
)

// KillAttacher ends fenceline-attacher with SIGKILL and starts it again
// with the same flags, as its Deployment would: whatever it was doing
// between two writes is cut there.
func (w *World) KillAttacher(ctx context.Context) error {
	if w.Attacher == nil {
		return fmt.Errorf("no fenceline-attacher in this world")
	}
	p, err := w.respawn(w.Attacher)
	if err != nil {
		return err
	}
	w.replaceAttacherProcess(w.Attacher, p)
	return nil
}

// StopAttacher ends fenceline-attacher with SIGKILL and leaves it down until
// StartAttacher, as a Deployment's pod that is rescheduled, pulls its image
// or waits for a node: the window in which others act without it. With
// Options.AttacherReplicas every replica goes down (no standby takes over).
func (w *World) StopAttacher() error {
	if w.Attacher == nil {
		return fmt.Errorf("no fenceline-attacher in this world")
	}
	for _, p := range w.AttacherProcesses() {
		p.Kill()
	}
	return nil
}

// StartAttacher starts fenceline-attacher again, with the same flags, after
// StopAttacher: every replica that is down.
func (w *World) StartAttacher() error {
	if w.Attacher == nil {
		return fmt.Errorf("no fenceline-attacher in this world")
	}
	for _, p := range w.AttacherProcesses() {
		if exited, _ := p.Exited(); !exited && len(w.Attachers) > 0 {
			continue // a replica that runs already (its supervisor restarted it)
		}
		next, err := p.Respawn()
		if err != nil {
			return err
		}
		w.Cluster.Track(next)
		w.replaceAttacherProcess(p, next)
	}
	return nil
}

// KillDriver ends the mock driver with SIGKILL, as a crash of the array's
// plugin does, and starts it again on the same sockets and state
// directory; it returns once every endpoint answers again. Calls in flight
// fail; what the array persisted stays.
func (w *World) KillDriver(ctx context.Context) error {
	if w.Driver == nil {
		return fmt.Errorf("no mock driver in this world")
	}
	p, err := w.respawn(w.Driver)
	if err != nil {
		return err
	}
	w.Driver = p
	for _, ep := range append([]string{w.ControllerSocket}, slices.Collect(maps.Values(w.NodeSockets))...) {
		if err := WaitDriverReady(ctx, p, ep); err != nil {
			return err
		}
	}
	return nil
}

// respawn kills p and starts the same command again, tracked by the
// cluster so that it stops with it.
func (w *World) respawn(p *cluster.Process) (*cluster.Process, error) {
	p.Kill()
	next, err := p.Respawn()
	if err != nil {
		return nil, err
	}
	w.Cluster.Track(next)
	return next, nil
}
