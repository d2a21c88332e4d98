package actuator

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
	_, err := a.addTaints(ctx, node, nil, []v1.Taint{taint}, why, check)
	return err
}

// AddTaintsFrom adds the taints in one write, each unless a taint with its
// key and effect is already there. fresh is the node as the caller just
// read it from the API server (or wrote it): the first try writes on it
// without a read of its own, and its resourceVersion makes the API server
// refuse the write if the node changed since; then the node is read again
// and check decides again. It returns the node as written (as found when
// nothing had to change; nil when the node is gone or was recreated).
func (a *Actuator) AddTaintsFrom(ctx context.Context, fresh *v1.Node, taints []v1.Taint, why string, check NodeCheck) (*v1.Node, error) {
	return a.addTaints(ctx, fresh, fresh, taints, why, check)
}

func (a *Actuator) addTaints(ctx context.Context, node, from *v1.Node, taints []v1.Taint, why string, check NodeCheck) (*v1.Node, error) {
	keys := make([]string, len(taints))
	for i, t := range taints {
		keys[i] = t.ToString()
	}
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if a.DryRun {
		logger.Info("Dry run: would taint node", "taints", keys, "why", why)
		for _, k := range keys {
			a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Dry run: would add taint %s: %s", k, why)
		}
		return from, nil
	}
	var added []string
	written, changed, err := a.updateNode(ctx, node, from, "add taints "+strings.Join(keys, ", "), check, func(n *v1.Node) bool {
		added = added[:0]
		for _, taint := range taints {
			if slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return nodeutil.TaintMatches(t, taint.Key, taint.Effect) }) {
				continue
			}
			t := taint
			if t.TimeAdded == nil {
				now := metav1.NewTime(a.now())
				t.TimeAdded = &now
			}
			n.Spec.Taints = append(n.Spec.Taints, t)
			added = append(added, t.ToString())
		}
		return len(added) > 0
	}, false)
	if err != nil {
		return nil, fmt.Errorf("adding taints %s to node %s: %w", strings.Join(keys, ", "), node.Name, err)
	}
	if changed {
		for _, k := range added {
			logger.Info("Tainted node", "taint", k, "why", why)
			a.Recorder.Eventf(node, v1.EventTypeWarning, EventTainted, "Added taint %s: %s", k, why)
		}
	}
	return written, nil
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
	_, changed, err := a.updateNode(ctx, node, nil, "remove taint "+key, check, func(n *v1.Node) bool {
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
	_, err := a.writeNode(ctx, node, nil, what, check, mutate, false)
	return err
}

// UpdateNodeFrom is UpdateNode whose first try starts from fresh, the node
// as the caller just read it from the API server, without a read (see
// AddTaintsFrom). It returns the node as written.
func (a *Actuator) UpdateNodeFrom(ctx context.Context, fresh *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool) (*v1.Node, error) {
	return a.writeNode(ctx, fresh, fresh, what, check, mutate, false)
}

// writeNode is updateNode with the dry run, the error's context and the
// log line of the exported writes.
func (a *Actuator) writeNode(ctx context.Context, node, fresh *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool, status bool) (*v1.Node, error) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	kind := "node"
	if status {
		kind = "node status"
	}
	if a.DryRun {
		logger.Info("Dry run: would update "+kind, "write", what)
		return fresh, nil
	}
	written, changed, err := a.updateNode(ctx, node, fresh, what, check, mutate, status)
	if err != nil {
		return nil, fmt.Errorf("node %s: %s: %w", node.Name, what, err)
	}
	if changed {
		logger.V(2).Info("Updated "+kind, "write", what)
	}
	return written, nil
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
	_, _, err := a.updateNode(ctx, node, nil, "release volumes", check, func(n *v1.Node) bool {
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
// attempt decides again on what it read. from, when set, is the node as the
// caller just read or wrote it: the first attempt starts from it without a
// read (its resourceVersion makes the API server refuse a stale one). A
// node that is gone or was recreated under the same name gets nothing
// (changed false, nil error): the decision was about another object. A
// check that no longer holds returns a *DecisionChangedError and records
// why on the node. It returns the node as written, or as read when nothing
// had to change.
func (a *Actuator) updateNode(ctx context.Context, node, from *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool, status bool) (written *v1.Node, changed bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		changed = false
		var n *v1.Node
		if from != nil && from.ResourceVersion != "" {
			n, from = from.DeepCopy(), nil
		} else if n, err = a.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			return err
		}
		if node.UID != "" && n.UID != node.UID {
			return errNodeRecreated
		}
		written = n
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
		var out *v1.Node
		if status {
			out, err = a.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		} else {
			out, err = a.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		}
		if err == nil {
			written, changed = out, true
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err), err == errNodeRecreated:
		return nil, false, nil
	case IsDecisionChanged(err):
		a.decisionChanged(ctx, node, err)
	}
	if err != nil {
		written = nil
	}
	return written, changed, err
}

var errNodeRecreated = fmt.Errorf("node was recreated")

// UpdateNodeStatus is UpdateNode for the node's status (conditions): it
// applies mutate to the fresh node after check re-decided on it and writes
// the status subresource.
func (a *Actuator) UpdateNodeStatus(ctx context.Context, node *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool) error {
	_, err := a.UpdateNodeStatusFrom(ctx, node, nil, what, check, mutate)
	return err
}

// UpdateNodeStatusFrom is UpdateNodeStatus whose first try starts from
// fresh, the node as the caller just read or wrote it, without a read (see
// AddTaintsFrom); nil fresh reads it. It returns the node as written.
func (a *Actuator) UpdateNodeStatusFrom(ctx context.Context, node, fresh *v1.Node, what string, check NodeCheck, mutate func(*v1.Node) bool) (*v1.Node, error) {
	return a.writeNode(ctx, node, fresh, what, check, mutate, true)
}
