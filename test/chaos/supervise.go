package chaos

import (
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// restartDelay is how long a component that exited on its own stays down
// before it is started again: the kubelet restarts a crashed container at
// once the first time, then backs off.
const restartDelay = time.Second

// supervise restarts, as a Deployment's pod would be, every product
// process that exits on its own: fenceline-attacher exits when it loses
// its driver's socket (as upstream's external-attacher does), a
// controller replica when it loses its leader lease. Processes the
// harness kills on purpose are replaced by the fault itself (retired).
func (e *episode) supervise(stop <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		e.procMu.Lock()
		w := e.w
		e.superviseAttachers()
		w.FenceAgent = e.restartIfExited(w.FenceAgent)
		for i, p := range w.Controllers {
			next := e.restartIfExited(p)
			if w.Controller == p {
				w.Controller = next
			}
			w.Controllers[i] = next
		}
		e.procMu.Unlock()
		e.respawnScheduler()
	}
}

// respawnScheduler restarts kube-scheduler if it exited on its own: it
// exits on purpose when an update shows a pod on another node than its
// cache holds, which a pod replaced under the same name while its watch
// re-lists after a kube-apiserver restart can bring about. The kubelet
// restarts its static pod; so does the harness, after restartDelay. No
// fault kills kube-scheduler, so no restart here races one.
func (e *episode) respawnScheduler() {
	p := e.w.Cluster.Newest(schedulerName)
	if p == nil {
		return
	}
	if exited, _ := p.Exited(); !exited {
		return
	}
	select {
	case <-time.After(restartDelay):
	case <-e.ctx.Done():
		return
	}
	ok, err := e.w.Cluster.RespawnIfExited(schedulerName)
	switch {
	case err != nil:
		e.timeline.Add(time.Now(), "restarting %s failed: %v", schedulerName, err)
	case ok:
		e.procMu.Lock()
		e.restarts++
		e.procMu.Unlock()
		e.timeline.Add(time.Now(), "%s exited on its own; restarted", schedulerName)
	}
}

// schedulerName is kube-scheduler's process name in the cluster.
const schedulerName = "kube-scheduler"

// restartIfExited returns p, or its restart if it exited on its own.
func (e *episode) restartIfExited(p *cluster.Process) *cluster.Process {
	if p == nil || e.retired[p] {
		return p
	}
	if exited, _ := p.Exited(); !exited {
		return p
	}
	select {
	case <-time.After(restartDelay):
	case <-e.ctx.Done():
		return p
	}
	next, err := p.Respawn()
	if err != nil {
		e.timeline.Add(time.Now(), "restarting %s failed: %v", p.Name, err)
		return p
	}
	e.w.Cluster.Track(next)
	e.restarts++
	e.timeline.Add(time.Now(), "%s exited on its own; restarted", p.Name)
	return next
}
