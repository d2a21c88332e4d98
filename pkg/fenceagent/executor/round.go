package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
)

// The Events of the executor, on the FencingRequest.
const (
	EventAttemptStarted = "FenceAttemptStarted"
	EventVerified       = "FenceVerified"
	EventAttemptFailed  = "FenceAttemptFailed"
	EventRoundFailed    = "FenceRoundFailed"
	EventRefused        = "FenceRefused"
	EventPowerOnFailed  = "PowerOnFailed"
)

// DefaultLevelTimeout bounds a level whose policy sets none (the CRD's
// default).
const DefaultLevelTimeout = 20 * time.Second

// maxMessage bounds an attempt's message (the API's limit).
const maxMessage = 1024

// errAborted stops a round whose request left phase Fencing or was deleted.
var errAborted = errors.New("the request is no longer fencing")

// errStale stops a round before its first attempt: the API server refused
// the attempt's start because the request changed since the version the
// round was decided on. Nothing was powered; the caller decides again.
var errStale = errors.New("the request changed since the round was decided")

// fenced is a device that read back Off, kept to power it on again when
// the action is Reboot.
type fenced struct {
	class  string
	device power.Device
	opts   power.Options
	secret *corev1.Secret
}

// runRound runs the policy's levels in ascending index and stops at the
// first one whose every class read back Off. A round with no such level
// adds one to status.failedRounds, in the write that ends its last
// attempt. req is the version Decide ran the round on: the round's first
// write is made on it alone, and a conflict there ends the round with
// errStale before any power action.
func (c *Controller) runRound(ctx context.Context, req *fencingv1alpha1.FencingRequest, policy *fencingv1alpha1.FencePolicy) error {
	logger := klog.FromContext(ctx)
	levels := slices.Clone(policy.Spec.Levels)
	slices.SortStableFunc(levels, func(a, b fencingv1alpha1.FenceLevel) int { return int(a.Index) - int(b.Index) })
	target, err := c.targets.Get(req.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		target = nil
	} else if err != nil {
		return fmt.Errorf("getting FenceTarget %s: %w", req.Spec.NodeName, err)
	}
	logger.Info("Fencing round starting", "policy", policy.Name, "failedRounds", req.Status.FailedRounds, "action", req.Spec.Action)
	var last *fencingv1alpha1.FencingRequest // as the round last wrote it; nil before
	for i, level := range levels {
		devs, cur, err := c.runLevel(ctx, req, last, target, level, i == len(levels)-1)
		if errors.Is(err, errAborted) {
			logger.Info("Fencing round stopped: the request is no longer fencing")
			return nil
		} else if err != nil {
			return err
		}
		last = cur
		if devs != nil {
			logger.Info("Node fenced", "level", level.Index)
			if req.Spec.Action == fencingv1alpha1.FenceActionReboot {
				c.powerOn(ctx, req, devs)
			}
			return nil
		}
	}
	if last == nil || last.Status.FailedRounds == req.Status.FailedRounds {
		// No attempt carried the count (a policy with no class).
		if last, err = c.countFailedRound(ctx, req.Name); err != nil {
			return err
		}
	}
	c.cfg.Recorder.Eventf(req, corev1.EventTypeWarning, EventRoundFailed, "Round %d: no level of FencePolicy %s fenced node %s; %d of %d rounds failed",
		last.Status.FailedRounds, policy.Name, req.Spec.NodeName, last.Status.FailedRounds, MaxAttempts(policy))
	logger.Info("Fencing round failed", "failedRounds", last.Status.FailedRounds, "maxAttempts", MaxAttempts(policy))
	return nil
}

// runLevel tries every class of the level, one after the other, within
// the level's timeout, and stops at the first that fails: the level can no
// longer succeed. It returns the devices when every class read back Off
// (nil otherwise) and the request as last written (written, the round's
// last write before the level, when the level wrote nothing). When last is
// set a failure fails the round, counted in the same write.
func (c *Controller) runLevel(ctx context.Context, req, written *fencingv1alpha1.FencingRequest, target *fencingv1alpha1.FenceTarget,
	level fencingv1alpha1.FenceLevel, last bool) ([]fenced, *fencingv1alpha1.FencingRequest, error) {
	timeout := DefaultLevelTimeout
	if level.Timeout != nil && level.Timeout.Duration > 0 {
		timeout = level.Timeout.Duration
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var devs []fenced
	for _, class := range level.FenceClassNames {
		dev, cur, err := c.runClass(ctx, lctx, req, written, target, level.Index, class, last)
		if err != nil {
			return nil, written, err
		}
		written = cur
		if dev == nil {
			return nil, written, nil
		}
		devs = append(devs, *dev)
	}
	return devs, written, nil // no devices for a level with no class: it proves nothing
}

// runClass is one attempt: recorded as started before the device is
// touched, so that a crash leaves a visible unfinished attempt, then
// ended with its result. lctx bounds the power-off (the level's time); ctx
// the agent's life: when ctx ends the attempt is left unfinished for the
// next leader to mark. It returns the device when it read back Off.
// written is the request as the round last wrote it, nil before its first
// write: the start is then written on req, the version the round was
// decided on, alone (startAttempt), and otherwise on written, so that it
// does not conflict with the round's own writes.
func (c *Controller) runClass(ctx, lctx context.Context, req, written *fencingv1alpha1.FencingRequest, target *fencingv1alpha1.FenceTarget,
	level int32, className string, failRound bool) (*fenced, *fencingv1alpha1.FencingRequest, error) {
	logger := klog.FromContext(ctx).WithValues("level", level, "fenceClass", className)
	p, failure := c.prepare(target, req.Spec.NodeName, className)
	a := fencingv1alpha1.FenceAttempt{Level: level, FenceClass: className, Method: p.method(), StartTime: metav1.NewTime(c.cfg.Now()).Rfc3339Copy()}
	from, first := written, written == nil
	if first {
		from = req
	}
	started, err := c.startAttempt(ctx, from, a, first)
	if err != nil {
		return nil, nil, err
	}
	c.cfg.Recorder.Eventf(req, corev1.EventTypeNormal, EventAttemptStarted, "Level %d, FenceClass %s (%s): powering off node %s", level, className, a.Method, req.Spec.NodeName)
	start := time.Now()
	var o outcome
	if failure != nil {
		o = outcome{result: fencingv1alpha1.FenceAttemptFailed, message: withCause(Cause(failure, ""), failure.Error())}
	} else {
		logger.Info("Powering off", "method", a.Method)
		o = c.powerOff(lctx, p)
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("attempt of level %d, FenceClass %s cut short: %w", level, className, ctx.Err())
		}
	}
	c.cfg.Metrics.Attempts.WithLabelValues(methodLabel(a.Method), string(o.result)).Inc()
	c.cfg.Metrics.Duration.WithLabelValues(methodLabel(a.Method)).Observe(time.Since(start).Seconds())
	ok := o.result == fencingv1alpha1.FenceAttemptSucceeded
	ended, err := c.finishAttempt(ctx, started, a, o, failRound && !ok)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		logger.Info("Fence attempt failed", "result", o.result, "powerState", o.state, "message", o.message)
		c.cfg.Recorder.Eventf(req, corev1.EventTypeWarning, EventAttemptFailed, "Level %d, FenceClass %s: %s: %s", level, className, o.result, o.message)
		return nil, ended, nil
	}
	logger.Info("Power read back Off", "message", o.message)
	c.cfg.Recorder.Eventf(req, corev1.EventTypeNormal, EventVerified, "Level %d, FenceClass %s: node %s read back Off", level, className, req.Spec.NodeName)
	return &fenced{class: className, device: p.Device, opts: p.opts, secret: p.Secret}, ended, nil
}

// prepared is what one attempt needs: the class, its Secret (to scrub
// errors), the device built from them and the class's power options.
type prepared struct {
	devices.Endpoint
	opts power.Options
}

func (p prepared) method() string {
	if p.Class == nil {
		return ""
	}
	return string(p.Class.Spec.Method)
}

// prepare finds the node's endpoint for the class, the class, its
// credentials, and builds the device; a failure says what is missing,
// without credentials.
func (c *Controller) prepare(target *fencingv1alpha1.FenceTarget, node, className string) (prepared, error) {
	if target == nil {
		return prepared{}, fmt.Errorf("%w: no FenceTarget %s: the node's fencing endpoints are unknown", devices.ErrInvalidConfiguration, node)
	}
	i := slices.IndexFunc(target.Spec.Endpoints, func(ep fencingv1alpha1.FenceEndpoint) bool { return ep.FenceClassName == className })
	if i < 0 {
		return prepared{}, fmt.Errorf("%w: FenceTarget %s has no endpoint for FenceClass %s", devices.ErrInvalidConfiguration, node, className)
	}
	e, err := c.source.Device(target.Spec.Endpoints[i])
	if err != nil {
		return prepared{Endpoint: e}, err
	}
	return prepared{Endpoint: e, opts: devices.PowerOptions(e.Class)}, nil
}

// outcome is how an attempt ended.
type outcome struct {
	result  fencingv1alpha1.FenceAttemptResult
	state   power.State
	message string
}

// powerOff cuts the power and reads it back (power.PowerOff) within lctx.
// Succeeded only with a read-back Off; TimedOut when the level's time ran
// out first.
func (c *Controller) powerOff(lctx context.Context, p prepared) outcome {
	res, err := power.PowerOff(lctx, p.Device, p.opts, c.cfg.Now)
	o := outcome{state: res.Verified}
	switch {
	case err == nil && power.Verified(res.Verified):
		o.result = fencingv1alpha1.FenceAttemptSucceeded
		o.message = fmt.Sprintf("power read back Off after %d power-off request(s)", res.Attempts)
	case errors.Is(lctx.Err(), context.DeadlineExceeded):
		o.result = fencingv1alpha1.FenceAttemptTimedOut
		o.message = timedOutMessage(err, res.Verified, devices.Scrub(err, p.Secret))
	case err == nil:
		o.result = fencingv1alpha1.FenceAttemptFailed
		o.message = fmt.Sprintf("power read back %s, not Off", res.Verified)
	default:
		o.result = fencingv1alpha1.FenceAttemptFailed
		o.message = withCause(Cause(err, res.Verified), devices.Scrub(err, p.Secret).Error())
	}
	return o
}

// powerOn powers the devices of a fenced level on again (action Reboot).
// The fence already counts: a failure is logged and reported, not retried.
func (c *Controller) powerOn(ctx context.Context, req *fencingv1alpha1.FencingRequest, devs []fenced) {
	for _, d := range devs {
		octx, cancel := context.WithTimeout(ctx, d.opts.ActionTimeout)
		err := devices.Scrub(d.device.On(octx), d.secret)
		cancel()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Powering the node on again failed; it stays off", "fenceClass", d.class)
			c.cfg.Recorder.Eventf(req, corev1.EventTypeWarning, EventPowerOnFailed, "FenceClass %s: powering node %s on after the fence failed; it stays off: %v",
				d.class, req.Spec.NodeName, err)
		}
	}
}

func methodLabel(m string) string {
	if m == "" {
		return "none"
	}
	return m
}
