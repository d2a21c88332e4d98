package world

import (
	"context"
	"fmt"

	"fenceline.io/fenceline/test/cluster"
)

// KillAttacher ends the (first) driver's fenceline-attacher with SIGKILL
// and starts it again with the same flags, as its Deployment would:
// whatever it was doing between two writes is cut there.
func (w *World) KillAttacher(ctx context.Context) error { return w.KillAttacherOf(ctx, DriverName) }

// KillAttacherOf is KillAttacher for the driver named driver.
func (w *World) KillAttacherOf(_ context.Context, driver string) error {
	g, err := w.attachersOf(driver)
	if err != nil {
		return err
	}
	p, err := w.respawn(g.Attacher)
	if err != nil {
		return err
	}
	g.replace(g.Attacher, p)
	return nil
}

// StopAttacher ends the (first) driver's fenceline-attacher with SIGKILL
// and leaves it down until StartAttacher, as a Deployment's pod that is
// rescheduled, pulls its image or waits for a node: the window in which
// others act without it. With Options.AttacherReplicas every replica goes
// down (no standby takes over).
func (w *World) StopAttacher() error { return w.StopAttacherOf(DriverName) }

// StopAttacherOf is StopAttacher for the driver named driver.
func (w *World) StopAttacherOf(driver string) error {
	g, err := w.attachersOf(driver)
	if err != nil {
		return err
	}
	for _, p := range g.processes() {
		p.Kill()
	}
	return nil
}

// StartAttacher starts the (first) driver's fenceline-attacher again, with
// the same flags, after StopAttacher: every replica that is down.
func (w *World) StartAttacher() error { return w.StartAttacherOf(DriverName) }

// StartAttacherOf is StartAttacher for the driver named driver.
func (w *World) StartAttacherOf(driver string) error {
	g, err := w.attachersOf(driver)
	if err != nil {
		return err
	}
	for _, p := range g.processes() {
		if exited, _ := p.Exited(); !exited && len(g.Attachers) > 0 {
			continue // a replica that runs already (its supervisor restarted it)
		}
		next, err := p.Respawn()
		if err != nil {
			return err
		}
		w.Cluster.Track(next)
		g.replace(p, next)
	}
	return nil
}

// attachersOf returns driver's attacher group, an error when the world
// runs no such driver or no attacher for it.
func (w *World) attachersOf(driver string) (*attacherGroup, error) {
	v, err := w.driver(driver)
	if err != nil {
		return nil, err
	}
	if v.attachers.Attacher == nil {
		return nil, fmt.Errorf("no fenceline-attacher of %s in this world", driver)
	}
	return v.attachers, nil
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
