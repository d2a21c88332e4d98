package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// restartTimeout bounds a component's return to health after a restart.
const restartTimeout = time.Minute

// KillAPIServer ends kube-apiserver with SIGKILL and starts it again with
// the same flags and port, returning once it is ready: every client sees
// its connections and watches break, then resume.
func (c *Cluster) KillAPIServer(ctx context.Context) error {
	return c.restart(ctx, "kube-apiserver", func(*Process) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}
	})
}

// KillControllerManager ends kube-controller-manager with SIGKILL and
// starts it again with the same flags, returning once it is healthy. Its
// controllers start over from a fresh List, as after a leader change.
func (c *Cluster) KillControllerManager(ctx context.Context) error {
	return c.restart(ctx, "kube-controller-manager", func(p *Process) func(context.Context) error {
		port := ""
		for _, a := range p.cmd.Args {
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				port = v
			}
		}
		return httpOK(insecureLoopbackClient, "https://127.0.0.1:"+port+"/healthz")
	})
}

// RespawnIfExited starts the newest tracked process called name again,
// with the same command, if it has exited on its own, as the kubelet
// restarts a crashed static pod (kube-scheduler exits on purpose when it
// finds its cache inconsistent). It reports whether it did; a name not
// tracked is not an error. Components a fault kills on purpose are
// restarted by the fault (KillAPIServer, KillControllerManager), not here.
func (c *Cluster) RespawnIfExited(name string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	idx := c.newest(name)
	if idx < 0 {
		return false, nil
	}
	if exited, _ := c.processes[idx].Exited(); !exited {
		return false, nil
	}
	next, err := c.processes[idx].Respawn()
	if err != nil {
		return false, fmt.Errorf("restarting %s: %w", name, err)
	}
	c.processes[idx] = next
	return true, nil
}

// restart kills the newest tracked process called name and starts it
// again until check passes; the new process replaces it in the tracked
// list. A start that exits at once (its port not yet released by the
// killed one) is retried.
func (c *Cluster) restart(ctx context.Context, name string, check func(*Process) func(context.Context) error) error {
	c.mu.Lock()
	idx := c.newest(name)
	var p *Process
	if idx >= 0 {
		p = c.processes[idx]
	}
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("restarting %s: not running in this cluster", name)
	}
	p.Kill()
	ctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	for {
		next, err := p.Respawn()
		if err != nil {
			return fmt.Errorf("restarting %s: %w", name, err)
		}
		c.mu.Lock()
		c.processes[idx] = next
		c.mu.Unlock()
		p = next
		err = waitReady(ctx, p, 200*time.Millisecond, check(p))
		if err == nil {
			return nil
		}
		if !errors.Is(err, errExited) || ctx.Err() != nil {
			return fmt.Errorf("restarting %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restarting %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Newest returns the newest tracked process called name, nil if none.
func (c *Cluster) Newest(name string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := c.newest(name); i >= 0 {
		return c.processes[i]
	}
	return nil
}

// newest is the index of the newest tracked process called name, -1 if
// none; c.mu must be held.
func (c *Cluster) newest(name string) int {
	for i := len(c.processes) - 1; i >= 0; i-- {
		if c.processes[i].Name == name {
			return i
		}
	}
	return -1
}
