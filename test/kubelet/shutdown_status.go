package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
)

// What a shutting-down kubelet posts while its pods are killed: its node
// not Ready and its Lease renewed, the pods it rejects, and its Events.

// shutdownRenewInterval is how often a shutting-down stand-in renews its
// node Lease, well inside cluster.NodeLeaseDurationSeconds.
const shutdownRenewInterval = time.Second

// admit drops from pods those the shutdown in progress rejects (bound to
// the node after it began), reporting each once as the kubelet's admission
// does; without a shutdown it returns pods as they are.
func (k *Kubelet) admit(ctx context.Context, pods []*corev1.Pod) []*corev1.Pod {
	k.mu.Lock()
	sd := k.shutdown
	if sd == nil {
		k.mu.Unlock()
		return pods
	}
	var keep, reject []*corev1.Pod
	for _, p := range pods {
		switch {
		case sd.admitted[p.UID], p.Status.Phase == corev1.PodSucceeded, p.Status.Phase == corev1.PodFailed:
			keep = append(keep, p)
		case !sd.rejected[p.UID]:
			sd.rejected[p.UID] = true
			reject = append(reject, p)
		}
	}
	k.mu.Unlock()
	for _, p := range reject {
		if err := k.reject(ctx, p); err != nil {
			klog.FromContext(ctx).Error(err, "Kubelet stand-in could not reject a pod during its shutdown; retrying", "pod", klog.KObj(p))
			k.mu.Lock()
			delete(sd.rejected, p.UID)
			k.mu.Unlock()
			continue
		}
		k.mu.Lock()
		sd.report.Rejected = append(sd.report.Rejected, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		k.mu.Unlock()
	}
	return keep
}

// reject reports a pod refused during a shutdown: Failed with the
// shutdown's reason, and a Warning Event on it.
func (k *Kubelet) reject(ctx context.Context, pod *corev1.Pod) error {
	err := k.updatePodStatus(ctx, pod, func(cur *corev1.Pod) {
		cur.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: ShutdownRejectReason, Message: ShutdownRejectMessage, QOSClass: cur.Status.QOSClass}
	})
	if err != nil {
		return fmt.Errorf("rejecting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	k.recordEvent(ctx, pod.Namespace, corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		corev1.EventTypeWarning, ShutdownRejectReason, "Pod was rejected as the node is shutting down.")
	return nil
}

// shuttingDownPatch is the kubelet's status update when the shutdown
// begins: Ready=False with the shutdown manager's error as message. A
// strategic merge patch keeps the other conditions (merged by type).
func shuttingDownPatch(now time.Time) ([]byte, error) {
	ts := metav1.NewTime(now)
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message: ShutdownReadyMessage, LastHeartbeatTime: ts, LastTransitionTime: ts,
	}}}})
	if err != nil {
		return nil, fmt.Errorf("encoding the shutting-down status: %w", err)
	}
	return patch, nil
}

// postShuttingDown posts the node not Ready because it is shutting down.
func (k *Kubelet) postShuttingDown(ctx context.Context) error {
	patch, err := shuttingDownPatch(time.Now())
	if err != nil {
		return fmt.Errorf("kubelet stand-in %s: %w", k.cfg.NodeName, err)
	}
	return k.patchNodeStatus(ctx, patch, "posting the node shutting down")
}

// renewWhileShuttingDown renews the node Lease until ctx ends, and posts
// the node shutting down again if something else posted another Ready
// condition since, as the kubelet's periodic status update would.
func (k *Kubelet) renewWhileShuttingDown(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(shutdownRenewInterval)
	defer tick.Stop()
	for {
		if err := k.renewLease(ctx); err != nil && ctx.Err() == nil {
			logger.V(4).Info("Kubelet stand-in could not renew its Lease; retrying", "err", err)
		}
		if n, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{}); err == nil {
			if c := nodeutil.ReadyCondition(n); c == nil || c.Status != corev1.ConditionFalse || c.Message != ShutdownReadyMessage {
				if err := k.postShuttingDown(ctx); err != nil && ctx.Err() == nil {
					logger.V(4).Info("Kubelet stand-in could not post its node shutting down; retrying", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renewLease renews the node's Lease in kube-node-lease, creating it if
// missing, as the kubelet's lease controller does.
func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, testobj.Lease(k.cfg.NodeName, now.Time,
				testobj.LeaseDuration(cluster.NodeLeaseDurationSeconds*time.Second)), metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// recordNodeEvent records a Normal shutdown Event on the node, as the
// kubelet's node shutdown manager does.
func (k *Kubelet) recordNodeEvent(ctx context.Context, message string) {
	k.recordEvent(ctx, metav1.NamespaceDefault, corev1.ObjectReference{Kind: "Node", Name: k.cfg.NodeName, UID: types.UID(k.cfg.NodeName)},
		corev1.EventTypeNormal, ShutdownEventReason, message)
}

// recordEvent creates an Event from the kubelet of this node; a failure
// is logged, as an event recorder drops what it cannot write.
func (k *Kubelet) recordEvent(ctx context.Context, namespace string, obj corev1.ObjectReference, typ, reason, message string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: obj.Name + ".", Namespace: namespace},
		InvolvedObject: obj, Type: typ, Reason: reason, Message: message,
		Source:         corev1.EventSource{Component: "kubelet", Host: k.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := k.cfg.Client.CoreV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).V(4).Info("Kubelet stand-in could not record an Event", "reason", reason, "err", err)
	}
}
