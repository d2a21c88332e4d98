package chaos

import (
	"fmt"
	"time"

	"fenceline.io/fenceline/test/world"
)

// setUpProxies puts an API proxy between kube-apiserver and each component
// an APILatency fault of the plan slows, before the workload starts: the
// component's kubeconfig names the proxy, and its processes restart to
// read it. The proxies pass bytes at once until a fault delays them.
func (e *episode) setUpProxies() error {
	for _, f := range e.p.Faults {
		if f.Kind != APILatency || e.proxies[f.Component] != nil {
			continue
		}
		if err := e.routeThroughProxy(f.Component); err != nil {
			return fmt.Errorf("API proxy of the %s: %w", f.Component, err)
		}
	}
	return nil
}

func (e *episode) routeThroughProxy(c Component) error {
	sa := map[Component]string{AttacherComponent: world.AttacherServiceAccount, ControllerComponent: world.ControllerServiceAccount}[c]
	if sa == "" {
		return fmt.Errorf("unknown component %q", c)
	}
	proxy, err := e.w.StartAPIProxy()
	if err != nil {
		return err
	}
	e.t.Cleanup(proxy.Close)
	_, path, err := e.w.Cluster.ServiceAccountKubeconfig(e.ctx, world.Namespace, sa)
	if err != nil {
		return err
	}
	if err := proxy.PointKubeconfig(path, e.w.Cluster.ServerURL()); err != nil {
		return err
	}
	e.proxies[c], e.kubeconfigs[c] = proxy, path
	e.timeline.Add(time.Now(), "the %s talks to kube-apiserver through a proxy at %s", c, proxy.URL())
	e.procMu.Lock()
	defer e.procMu.Unlock()
	if c == AttacherComponent {
		// Every driver's attacher shares the ServiceAccount, so its
		// kubeconfig: each restarts to read it.
		for _, d := range e.p.Drivers() {
			if err := e.restartAttacher(d); err != nil {
				return err
			}
		}
		return nil
	}
	for i, p := range e.w.Controllers {
		p.Kill()
		next, err := p.Respawn()
		if err != nil {
			return err
		}
		e.w.Cluster.Track(next)
		if e.w.Controller == p {
			e.w.Controller = next
		}
		e.w.Controllers[i] = next
	}
	return nil
}

// restartAttacher restarts driver's attacher: every replica (none leads
// for a moment), or the one process. Callers hold procMu.
func (e *episode) restartAttacher(driver string) error {
	if e.p.AttacherReplicas > 1 {
		if err := e.w.StopAttacherOf(driver); err != nil {
			return err
		}
		return e.w.StartAttacherOf(driver)
	}
	return e.w.KillAttacherOf(e.ctx, driver)
}

// repointController names the controller's proxy in its kubeconfig again
// after a fault started a new replica, which writes a fresh kubeconfig:
// later restarts use the proxy again (the new replica may already have
// read the direct one).
func (e *episode) repointController() {
	if p := e.proxies[ControllerComponent]; p != nil {
		_ = p.PointKubeconfig(e.kubeconfigs[ControllerComponent], e.w.Cluster.ServerURL())
	}
}

// apiLatency delays the component's API traffic by f.Delay for f.For.
func (e *episode) apiLatency(f Fault) error {
	p := e.proxies[f.Component]
	if p == nil {
		return fmt.Errorf("no API proxy for the %s", f.Component)
	}
	p.SetDelay(f.Delay)
	err := e.sleepUntil(time.Now().Add(f.For))
	p.SetDelay(0)
	e.timeline.Add(time.Now(), "the %s's API traffic on time again", f.Component)
	return err
}

// endLatency passes every proxy's bytes at once again, at the restore.
func (e *episode) endLatency() {
	for _, p := range e.proxies {
		p.SetDelay(0)
	}
}
