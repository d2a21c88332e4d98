package nodefencing

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

// checkPower asks the fence agent to read the node's power, after deciding
// again on the node, its Lease, its requests and its FenceTarget as the API
// server has them now. The ask is read-only: the agent reads the devices
// and answers in the target's status, whose update brings the node back
// here. It returns the decision's recheck: the Lease's stale time still
// holds if no answer comes.
func (c *Controller) checkPower(ctx context.Context, in Input, d Decision) (time.Duration, error) {
	fresh, err := c.freshInput(ctx, in.Node.Name, nil, nil, false)
	if err != nil {
		return 0, err
	}
	fd := Decide(fresh)
	if fd.Step != StepCheckPower {
		klog.FromContext(ctx).V(2).Info("Not asking for a power check: decision changed on fresh data", "why", fd.Why, "recheckAfter", fd.RecheckAfter)
		return afterChangedDecision(fd), nil
	}
	token := detect.PowerCheckToken(fresh.Lease)
	// The target's UID as read: an ask never lands on a target recreated
	// since the decision. Not its resourceVersion: the fence agent's probes
	// rewrite every target's status every few seconds, and a status one
	// of them replaced since the read changes nothing of a read-only ask
	// (its token names the renewal it is about), where a refused ask costs
	// a read and a write more, and a slow API server's seconds each.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         fresh.Target.UID,
		"annotations": map[string]string{names.PowerCheckAnnotation: token},
	}})
	if err != nil {
		return 0, fmt.Errorf("encoding the power check of node %s: %w", in.Node.Name, err)
	}
	_, err = c.cfg.Client.FencingV1alpha1().FenceTargets().Patch(ctx, fresh.Target.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: powerCheckFieldManager})
	switch {
	case apierrors.IsConflict(err):
		return 0, fmt.Errorf("FenceTarget %s was recreated before the power check was asked: %w", fresh.Target.Name, err)
	case err != nil:
		return 0, fmt.Errorf("asking the power check of node %s on FenceTarget %s: %w", in.Node.Name, fresh.Target.Name, err)
	}
	klog.FromContext(ctx).Info("Node missed its Lease renewal: asked the fence agent to read its power", "fenceTarget", fresh.Target.Name, "token", token)
	c.cfg.Metrics.ObservePowerCheck()
	return fd.RecheckAfter, nil
}

// powerCheckFieldManager names node-fencing's ask in managedFields.
const powerCheckFieldManager = "fenceline-controller"

// powerCheckAnswered reports whether cur answers a power check that old
// did not (a new answer, or a new state for the same ask), the update that
// brings the node back to its decision.
func powerCheckAnswered(old, cur *fencingv1alpha1.FenceTarget) bool {
	a, b := old.Status.PowerCheck, cur.Status.PowerCheck
	return b != nil && (a == nil || *a != *b)
}
