package world

import (
	"context"
	"fmt"

	"fenceline.io/fenceline/test/kubelet"
)

// GracefulShutdown shuts node down as `systemctl poweroff` does on a node
// whose kubelet has graceful node shutdown configured (KEP-2000;
// kubelet.ShutdownConfig): KWOK lets the node go, and its kubelet stand-in
// posts it shutting down, renews its Lease, rejects new pods, kills its
// pods in priority groups within the grace periods and unmounts their
// volumes, then the machine powers off. powerOff is how the power goes at
// the end: World.PowerOff when nil; a BMC's PowerLoss for a node with a
// BMC, so that the BMC reads Off as after any power-off the OS makes.
// Nobody else fences or taints anything. PowerOn (or the BMC's power-on)
// boots the node again.
//
// Real-kubelet nodes are refused: their kubelet's node shutdown manager
// needs systemd-logind on the system D-Bus (an inhibitor lock, logind's
// PrepareForShutdown signal), which the harness does not provide.
func (w *World) GracefulShutdown(ctx context.Context, node string, cfg kubelet.ShutdownConfig, powerOff func(context.Context) error) (kubelet.ShutdownReport, error) {
	if w.RealKubelets[node] != nil {
		return kubelet.ShutdownReport{}, fmt.Errorf("graceful shutdown of %s: a real-kubelet node has no systemd-logind to announce a shutdown to its kubelet", node)
	}
	k := w.Kubelets[node]
	if k == nil {
		return kubelet.ShutdownReport{}, fmt.Errorf("graceful shutdown of %s: no such node", node)
	}
	if !k.Powered() || k.Partitioned() {
		return kubelet.ShutdownReport{}, fmt.Errorf("graceful shutdown of %s: the node is off or partitioned", node)
	}
	// KWOK posts the status and renews the Lease of the nodes it manages:
	// from here on the stand-in does, as the node's kubelet.
	if err := w.Cluster.PowerOff(ctx, node); err != nil {
		return kubelet.ShutdownReport{}, err
	}
	rep, err := k.Shutdown(ctx, cfg)
	if err != nil {
		return rep, fmt.Errorf("graceful shutdown of %s: %w", node, err)
	}
	if powerOff == nil {
		powerOff = func(ctx context.Context) error { return w.PowerOff(ctx, node) }
	}
	if err := powerOff(ctx); err != nil {
		return rep, fmt.Errorf("graceful shutdown of %s: powering off: %w", node, err)
	}
	return rep, nil
}
