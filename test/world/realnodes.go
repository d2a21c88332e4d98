package world

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/realkubelet"
)

// startRealKubelets starts a real-kubelet node for each of
// Options.RealKubelets, every mock driver's node socket for it registered
// with its kubelet, and waits for each to be Ready.
func (w *World) startRealKubelets(ctx context.Context) error {
	for _, n := range w.realNames {
		drivers := map[string]string{}
		for _, d := range w.DriverNames() {
			v, _ := w.driver(d)
			drivers[d] = v.nodeSockets[n]
		}
		node, err := realkubelet.Start(ctx, realkubelet.Config{
			NodeName: n, Cluster: w.Cluster, Drivers: drivers,
			Dir:           filepath.Join(w.Cluster.Dir(), "real", n),
			WriteInterval: w.writeInterval, ZombieWrites: w.zombieWrites, HeldOpen: w.heldOpen,
			LeaseSeconds: w.realLease, StatusUpdate: w.realStatus,
		})
		if err != nil {
			return fmt.Errorf("real-kubelet node %s: %w", n, err)
		}
		w.RealKubelets[n] = node
	}
	return nil
}

// nodeKubelet is what the world reads of a node's kubelet, a stand-in or
// a real one.
type nodeKubelet interface {
	Writes() []kubelet.Write
	Powered() bool
	Partitioned() bool
}

// kubeletOf returns node's kubelet, nil for a node the world does not run.
func (w *World) kubeletOf(node string) nodeKubelet {
	if n := w.RealKubelets[node]; n != nil {
		return n
	}
	if k := w.Kubelets[node]; k != nil {
		return k
	}
	return nil
}

// NodeWrites returns the write attempts of node's workload so far, oldest
// first, whether a kubelet stand-in or a real kubelet runs it.
func (w *World) NodeWrites(node string) []kubelet.Write {
	if k := w.kubeletOf(node); k != nil {
		return k.Writes()
	}
	return nil
}

// nodePowered reports whether node is powered on, and false for a node
// the world does not run.
func (w *World) nodePowered(node string) (powered, ok bool) {
	if k := w.kubeletOf(node); k != nil {
		return k.Powered(), true
	}
	return false, false
}

// NodeUp reports whether node's kubelet serves: powered on and not cut off
// from the control plane (a stand-in's partition, a real kubelet frozen).
func (w *World) NodeUp(node string) bool {
	k := w.kubeletOf(node)
	return k != nil && k.Powered() && !k.Partitioned()
}

// NodePartitioned reports whether node runs on while its kubelet is cut
// off from the control plane (PartitionHeal ends that).
func (w *World) NodePartitioned(node string) bool {
	k := w.kubeletOf(node)
	return k != nil && k.Partitioned()
}

// AllNodes returns the KWOK nodes, then the real-kubelet ones.
func (w *World) AllNodes() []string { return slices.Concat(w.Nodes, w.realNames) }

// Cordon marks nodes unschedulable, or schedulable again with on false.
func (w *World) Cordon(ctx context.Context, on bool, nodes ...string) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	for _, n := range nodes {
		if _, err := w.Cluster.Client().CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("cordoning %s (%t): %w", n, on, err)
		}
	}
	return nil
}

// OnlyOn cordons every node of the world but node, so that what is
// scheduled next lands there; the returned function uncordons them again.
func (w *World) OnlyOn(ctx context.Context, node string) (func(context.Context) error, error) {
	others := slices.DeleteFunc(w.AllNodes(), func(n string) bool { return n == node })
	if err := w.Cordon(ctx, true, others...); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return w.Cordon(ctx, false, others...) }, nil
}
