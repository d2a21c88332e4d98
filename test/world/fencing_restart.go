package world

import (
	"context"
	"fmt"
)

// KillFenceAgent ends fenceline-fence-agent with SIGKILL, as a node crash
// or an OOM kill does, and starts a new one with the same flags (as its
// Deployment would), logging to fenceline-fence-agent-<n>.log.
func (w *World) KillFenceAgent(ctx context.Context) error {
	if w.FenceAgent == nil {
		return fmt.Errorf("no fenceline-fence-agent in this world")
	}
	w.FenceAgent.Kill()
	w.fenceAgentRestarts++
	name := fmt.Sprintf("fenceline-fence-agent-%d", w.fenceAgentRestarts)
	p, err := w.startComponentAs(ctx, name, "fenceline-fence-agent", "fence-agent", FenceAgentServiceAccount, w.fenceAgentArgs)
	if err != nil {
		return err
	}
	w.FenceAgent = p
	return nil
}

// KillController ends the running fenceline-controller with SIGKILL and
// starts a new replica with the same flags (StartControllerReplica).
func (w *World) KillController(ctx context.Context) error {
	if w.Controller == nil {
		return fmt.Errorf("no fenceline-controller in this world")
	}
	w.Controller.Kill()
	p, err := w.StartControllerReplica(ctx)
	if err != nil {
		return err
	}
	w.Controller = p
	return nil
}
