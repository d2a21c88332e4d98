package world

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// OutOfServiceTaint is the KEP-2268 taint an operator adds to a node known
// to be off.
var OutOfServiceTaint = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// AddTaint adds taint to node unless a taint with its key and effect is there.
func (w *World) AddTaint(ctx context.Context, node string, taint corev1.Taint) error {
	return w.updateNode(ctx, node, func(n *corev1.Node) bool {
		for _, t := range n.Spec.Taints {
			if t.Key == taint.Key && t.Effect == taint.Effect {
				return false
			}
		}
		now := metav1.Now()
		taint.TimeAdded = &now
		n.Spec.Taints = append(n.Spec.Taints, taint)
		return true
	})
}

// AddTaintAppliedBy adds taint to node in one write with the annotation
// another fencer marks its out-of-service taint with
// (node.kubernetes.io/out-of-service-applied-by), as OpenShift's
// Pacemaker-based fencing does.
func (w *World) AddTaintAppliedBy(ctx context.Context, node string, taint corev1.Taint, by string) error {
	return w.updateNode(ctx, node, func(n *corev1.Node) bool {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[names.OutOfServiceAppliedByAnnotation] = by
		if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taint.Key && t.Effect == taint.Effect }) {
			now := metav1.Now()
			taint.TimeAdded = &now
			n.Spec.Taints = append(n.Spec.Taints, taint)
		}
		return true
	})
}

// RemoveTaint removes every taint with key from node.
func (w *World) RemoveTaint(ctx context.Context, node, key string) error {
	return w.updateNode(ctx, node, func(n *corev1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
		return len(n.Spec.Taints) != before
	})
}

func (w *World) updateNode(ctx context.Context, name string, mutate func(*corev1.Node) bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !mutate(n) {
			return nil
		}
		_, err = w.Cluster.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating node %s: %w", name, err)
	}
	return nil
}

// HasTaint reports whether node carries a taint with key.
func (w *World) HasTaint(ctx context.Context, node, key string) (bool, error) {
	n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("getting node %s: %w", node, err)
	}
	return nodeutil.HasTaint(n, key), nil
}

// WaitFor polls cond every 100 ms until it holds or timeout passes; what
// describes the condition in the error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// RunningPod returns the pod namespace/name if it is Running, not being
// deleted, and on a node; nil otherwise.
func (w *World) RunningPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := w.Cluster.Client().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
		return nil, nil
	}
	return p, nil
}

// WaitRunning waits until pod namespace/name is Running (on a node other
// than notOn, when given) and returns it.
func (w *World) WaitRunning(ctx context.Context, namespace, name, notOn string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := WaitFor(ctx, timeout, fmt.Sprintf("pod %s/%s Running", namespace, name), func(ctx context.Context) (bool, error) {
		p, err := w.RunningPod(ctx, namespace, name)
		if err != nil || p == nil || (notOn != "" && p.Spec.NodeName == notOn) {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		pod = p
		return true, nil
	})
	return pod, err
}

// CreateNamespace creates a namespace for a test's workload.
func (w *World) CreateNamespace(ctx context.Context, name string) error {
	_, err := w.Cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// SetDriverAnnotation sets an annotation on the CSIDriver object (e.g. to switch
// safe-detach on during a test).
func (w *World) SetDriverAnnotation(ctx context.Context, key, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	if _, err := w.Cluster.Client().StorageV1().CSIDrivers().Patch(ctx, DriverName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating CSIDriver: %w", err)
	}
	return nil
}
