package actuator

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// AddTaint adds the taint to the node unless a taint with the same key and
// effect is already there. check re-decides on the fresh node first.
func (a *Actuator) AddTaint(ctx context.Context, node *v1.Node, taint v1.Taint, why string, check NodeCheck) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node), "taint", taint.ToString())
	if a.DryRun {
		logger.Info("Dry run: would taint node", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Dry run: would add taint %s: %s", taint.ToString(), why)
		return nil
	}
	what := "add taint " + taint.ToString()
	changed, err := a.updateNode(ctx, node, what, check, func(n *v1.Node) bool {
		if slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return nodeutil.TaintMatches(t, taint.Key, taint.Effect) }) {
			return false
		}
		t := taint
		if t.TimeAdded == nil {
			now := metav1.NewTime(a.now())
			t.TimeAdded = &now
		}
		n.Spec.Taints = append(n.Spec.Taints, t)
		return true
	}, false)
	if err != nil {
		return fmt.Errorf("adding taint %s to node %s: %w", taint.Key, node.Name, err)
	}
	if changed {
		logger.Info("Tainted node", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Added taint %s: %s", taint.ToString(), why)
	}
	return nil
}

// RemoveTaint removes every taint with the key and effect (any effect when
// effect is empty) from the node. check re-decides on the fresh node first.
func (a *Actuator) RemoveTaint(ctx context.Context, node *v1.Node, key string, effect v1.TaintEffect, why string, check NodeCheck) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node), "taint", key)
	if a.DryRun {
		logger.Info("Dry run: would remove taint", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventUntainted, "Dry run: would remove taint %s: %s", key, why)
		return nil
	}
	changed, err := a.updateNode(ctx, node, "remove taint "+key, check, func(n *v1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return nodeutil.TaintMatches(t, key, effect) })
		return len(n.Spec.Taints) != before
	}, false)
	if err != nil {
		return fmt.Errorf("removing taint %s from node %s: %w", key, node.Name, err)
	}
	if changed {
		logger.Info("Removed taint", "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventUntainted, "Removed taint %s: %s", key, why)
	}
	return nil
}

// UpdateNode applies mutate to the fresh node after check re-decided on it,
// for state a controller records on the node (annotations). mutate returns
// false when nothing needs to change.
func (a *Actuator) UpdateNode(ctx context.Context, node *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if a.DryRun {
		logger.Info("Dry run: would update node", "write", what)
		return nil
	}
	changed, err := a.updateNode(ctx, node, what, check, mutate, false)
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", node.Name, what, err)
	}
	if changed {
		logger.V(2).Info("Updated node", "write", what)
	}
	return nil
}

// ReleaseVolumes removes the named volumes from node.status.volumesInUse
// (and, when alsoAttached, from node.status.volumesAttached). The
// attach/detach controller then no longer waits for the dead kubelet to
// report them unmounted and detaches at once. check re-decides on the fresh
// node, so a kubelet that reported in since the decision is never
// overwritten. It returns the names it removed.
func (a *Actuator) ReleaseVolumes(ctx context.Context, node *v1.Node, vols []v1.UniqueVolumeName, alsoAttached bool, why string, check NodeCheck) ([]v1.UniqueVolumeName, error) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if len(vols) == 0 {
		return nil, nil
	}
	if a.DryRun {
		logger.Info("Dry run: would release volumes from node status", "volumes", vols, "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventVolumesReleased, "Dry run: would release volumes %v: %s", vols, why)
		return nil, nil
	}
	var removed []v1.UniqueVolumeName
	_, err := a.updateNode(ctx, node, "release volumes", check, func(n *v1.Node) bool {
		removed = nil
		n.Status.VolumesInUse = slices.DeleteFunc(n.Status.VolumesInUse, func(v v1.UniqueVolumeName) bool {
			if slices.Contains(vols, v) {
				removed = append(removed, v)
				return true
			}
			return false
		})
		if alsoAttached {
			n.Status.VolumesAttached = slices.DeleteFunc(n.Status.VolumesAttached, func(v v1.AttachedVolume) bool {
				if !slices.Contains(vols, v.Name) {
					return false
				}
				if !slices.Contains(removed, v.Name) {
					removed = append(removed, v.Name)
				}
				return true
			})
		}
		return len(removed) > 0
	}, true)
	if err != nil {
		return nil, fmt.Errorf("releasing volumes from node %s status: %w", node.Name, err)
	}
	if len(removed) > 0 {
		logger.Info("Released volumes from node status", "volumes", removed, "why", why)
		a.Recorder.Eventf(node, v1.EventTypeNormal, EventVolumesReleased, "Released volumes %v from node status: %s", removed, why)
	}
	return removed, nil
}

// updateNode reads the node fresh, re-decides with check, applies mutate and
// writes it back (status when status is true), retrying on conflicts: each
// attempt decides again on what it read. A node that is gone or was
// recreated under the same name gets nothing (changed false, nil error): the
// decision was about another object. A check that no longer holds returns a
// *DecisionChangedError and records why on the node.
func (a *Actuator) updateNode(ctx context.Context, node *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool, status bool) (changed bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed = false
		n, err := a.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if node.UID != "" && n.UID != node.UID {
			return errNodeRecreated
		}
		if !mutate(n.DeepCopy()) {
			return nil // nothing to change: no need to decide
		}
		if check == nil {
			return &DecisionChangedError{What: what, Why: "no decision to re-check at write time"}
		}
		if ok, why := check(n); !ok {
			return &DecisionChangedError{What: what, Why: why}
		}
		mutate(n)
		if status {
			_, err = a.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		} else {
			_, err = a.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
		if err == nil {
			changed = true
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err), err == errNodeRecreated:
		return false, nil
	case IsDecisionChanged(err):
		a.decisionChanged(ctx, node, err)
	}
	return changed, err
}

var errNodeRecreated = fmt.Errorf("node was recreated")

// UpdateNodeStatus is UpdateNode for the node's status (conditions): it
// applies mutate to the fresh node after check re-decided on it and writes
// the status subresource.
func (a *Actuator) UpdateNodeStatus(ctx context.Context, node *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool) error {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if a.DryRun {
		logger.Info("Dry run: would update node status", "write", what)
		return nil
	}
	changed, err := a.updateNode(ctx, node, what, check, mutate, true)
	if err != nil {
		return fmt.Errorf("node %s: %s: %w", node.Name, what, err)
	}
	if changed {
		logger.V(2).Info("Updated node status", "write", what)
	}
	return nil
}
