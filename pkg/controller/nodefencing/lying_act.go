package nodefencing

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// reportLie keeps the node's lying-fence condition, metric and Events in
// line with LieCondition: a lie caught sets the condition True with a
// Warning Event on the Node and its FencingRequest; a lie over sets it
// False. It writes nothing else: the fence, its taints and the storage
// fence stay as they are. The condition write is made again on the fresh
// node and request (the same LieCondition), so a stale cache never flags
// or clears it.
func (c *Controller) reportLie(ctx context.Context, in Input) error {
	node := liveNode(in)
	cond, write := LieCondition(in)
	lying := (write && cond.Status == v1.ConditionTrue) || (!write && lieRecorded(node))
	c.cfg.Metrics.SetLyingFence(nodeName(in), lying)
	if !write {
		return nil
	}
	if cur := nodeutil.Condition(node, names.LyingFenceCondition); cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason {
		return nil
	}
	check := func(fresh *v1.Node) (bool, string) {
		fin, err := c.freshInput(ctx, fresh.Name, fresh, in.Request, false)
		if err != nil {
			return false, err.Error()
		}
		again, ok := LieCondition(fin)
		if !ok || again.Status != cond.Status {
			return false, "the lying-fence condition changed on fresh data"
		}
		return true, again.Message
	}
	if err := c.setNodeConditions(ctx, node, check, cond); err != nil {
		return fmt.Errorf("setting %s=%s on node %s: %w", names.LyingFenceCondition, cond.Status, node.Name, err)
	}
	logger := klog.FromContext(ctx)
	if cond.Status != v1.ConditionTrue {
		logger.Info("Lying fence over", "node", node.Name, "reason", cond.Reason, "why", cond.Message)
		return nil
	}
	logger.Error(nil, "Lying fence caught: the node was recorded powered off and is alive", "node", node.Name, "request", in.Request.Name, "why", cond.Message)
	c.cfg.Metrics.ObserveLyingFenceCaught()
	c.cfg.Actuator.Recorder.Eventf(node, v1.EventTypeWarning, EventLyingFence, "%s", cond.Message)
	c.cfg.Recorder.Eventf(in.Request, v1.EventTypeWarning, EventLyingFence, "%s", cond.Message)
	return nil
}
