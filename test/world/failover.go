package world

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/invariant"
)

// Partition cuts node off from the control plane while it keeps running:
// KWOK stops heartbeating it, exactly as after a power cut, but its kubelet
// stand-in keeps its mounts and its writers go on. PartitionHeal ends it;
// PowerOn would instead reboot the node. A node that is off (a fence
// powered it off) stays off: there is nothing left to cut off.
func (w *World) Partition(ctx context.Context, node string) error {
	if n := w.RealKubelets[node]; n != nil {
		if !n.Powered() {
			return nil // as the stand-in: a partition of a node that is off changes nothing
		}
		return n.Freeze()
	}
	k := w.Kubelets[node]
	if k == nil {
		return fmt.Errorf("partitioning %s: no such node", node)
	}
	k.Partition()
	return w.Cluster.PowerOff(ctx, node)
}

// PartitionHeal ends a Partition of node: same boot ID, mounts and writers
// intact. The stand-in reports Ready and volumesInUse in one status
// update, then KWOK takes the node back (heartbeats and lease); pods and
// volumes that left meanwhile are cleaned up without force. It returns
// once the node is Ready.
func (w *World) PartitionHeal(ctx context.Context, node string) error {
	if n := w.RealKubelets[node]; n != nil {
		if err := n.Thaw(); err != nil {
			return err
		}
		return w.Cluster.WaitNodeReady(ctx, node, corev1.ConditionTrue, cluster.NodeReadyTimeout)
	}
	k := w.Kubelets[node]
	if k == nil {
		return fmt.Errorf("healing %s: no such node", node)
	}
	if err := k.Heal(ctx); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{cluster.PoweredLabel: cluster.PoweredOn}}})
	if err != nil {
		return fmt.Errorf("encoding the power label patch: %w", err)
	}
	if _, err := w.Cluster.Client().CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("handing %s back to KWOK: %w", node, err)
	}
	return w.Cluster.WaitNodeReady(ctx, node, corev1.ConditionTrue, cluster.NodeReadyTimeout)
}

// CheckFailover reads the driver's audit log and judges one failover with
// invariant.Check.
func (w *World) CheckFailover(f invariant.Failover) (invariant.Result, error) {
	recs, err := w.Audit()
	if err != nil {
		return invariant.Result{}, err
	}
	return invariant.Check(recs, f), nil
}
