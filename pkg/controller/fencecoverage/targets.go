package fencecoverage

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// EventTargetWithoutNode (Warning, on a FenceTarget): no Node has the
// FenceTarget's name, so it fences nothing: a typo, or a node that was
// removed (its FenceTarget and BMC credentials can go too).
const EventTargetWithoutNode = "FencelineFenceTargetWithoutNode"

// syncTarget says once, with a Warning Event, that a FenceTarget names no
// Node, and counts such targets.
func (c *Controller) syncTarget(ctx context.Context, name string) (time.Duration, error) {
	target, err := c.targets.Get(name)
	if apierrors.IsNotFound(err) {
		c.setOrphan(name, false)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	_, err = c.nodes.Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	orphan := apierrors.IsNotFound(err)
	if c.setOrphan(name, orphan) && orphan {
		c.cfg.Recorder.Eventf(target, v1.EventTypeWarning, EventTargetWithoutNode,
			"No Node is named %s: this FenceTarget fences nothing (a typo in its name, or a node that was removed)", name)
		klog.FromContext(ctx).Info("FenceTarget names no Node", "fenceTarget", name)
	}
	return 0, nil
}

// setOrphan records whether the target names no Node and reports whether
// that changed; the metric follows.
func (c *Controller) setOrphan(name string, orphan bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orphans[name] == orphan {
		return false
	}
	if orphan {
		c.orphans[name] = true
	} else {
		delete(c.orphans, name)
	}
	c.cfg.Metrics.setOrphans(len(c.orphans))
	return true
}
