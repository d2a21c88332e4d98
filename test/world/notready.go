package world

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"fenceline.io/fenceline/test/cluster"
)

// leaseRenewInterval is how often PostNotReady renews the node Lease,
// well inside cluster.NodeLeaseDurationSeconds.
const leaseRenewInterval = time.Second

// PostNotReady plays a live kubelet that reports its node NotReady itself
// (its container runtime is down, say) while it keeps renewing its node
// Lease: KWOK stops managing the node (it would report Ready again at
// once), the node gets Ready=False with reason KubeletNotReady, and the
// Lease in kube-node-lease is renewed every second. The node's stand-in,
// mounts and writers are left as they are. The returned function ends it:
// the renewals stop and KWOK, managing the node again, reports it Ready; it
// returns once the node is Ready.
func (w *World) PostNotReady(ctx context.Context, node string) (ready func(context.Context) error, err error) {
	client := w.Cluster.Client()
	if err := w.Cluster.PowerOff(ctx, node); err != nil {
		return nil, err
	}
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message: "container runtime is down", LastHeartbeatTime: now, LastTransitionTime: now,
	}}}})
	if err != nil {
		return nil, fmt.Errorf("encoding the NotReady status: %w", err)
	}
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return nil, fmt.Errorf("posting NotReady for %s: %w", node, err)
	}
	renewCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	renew := func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(renewCtx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(renewCtx, l, metav1.UpdateOptions{})
			return err
		})
	}
	if err := renew(); err != nil {
		cancel()
		return nil, fmt.Errorf("renewing the Lease of %s: %w", node, err)
	}
	wg.Go(func() {
		t := time.NewTicker(leaseRenewInterval)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				_ = renew() // a missed renewal is retried on the next tick
			}
		}
	})
	return func(ctx context.Context) error {
		cancel()
		wg.Wait()
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{cluster.PoweredLabel: cluster.PoweredOn}}})
		if err != nil {
			return fmt.Errorf("encoding the power label patch: %w", err)
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("handing %s back to KWOK: %w", node, err)
		}
		return w.Cluster.WaitNodeReady(ctx, node, corev1.ConditionTrue, cluster.NodeReadyTimeout)
	}, nil
}

// NodeLease returns node's Lease in kube-node-lease.
func (w *World) NodeLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	return w.Cluster.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
}
