package executor

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/apitext"
)

// updateStatus applies change to the request read fresh from the API
// server and writes its status, again on a conflict: the controller writes
// the phase and conditions of the same object concurrently, and each side
// changes only its own fields on the latest version. change returns false
// to write nothing. It returns the request as last read or written.
//
// from, when set, is the request as this agent last read or wrote it: the
// first try changes it without a read, and the write's resourceVersion
// makes the API server refuse it (a conflict, then a fresh read) if
// anything changed since. A slow API server then costs one round trip per
// write, not two.
func (c *Controller) updateStatus(ctx context.Context, name string, from *fencingv1alpha1.FencingRequest, change func(*fencingv1alpha1.FencingRequest) (bool, error)) (*fencingv1alpha1.FencingRequest, error) {
	client := c.cfg.Client.FencingV1alpha1().FencingRequests()
	var out *fencingv1alpha1.FencingRequest
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var req *fencingv1alpha1.FencingRequest
		if from != nil && from.Name == name && from.ResourceVersion != "" {
			req, from = from.DeepCopy(), nil
		} else {
			var err error
			if req, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		write, err := change(req)
		if err != nil || !write {
			out = req
			return err
		}
		out, err = client.UpdateStatus(ctx, req, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating status of FencingRequest %s: %w", name, err)
	}
	return out, nil
}

// updateStatusOnce applies change to req and writes its status once: no
// read, no retry. The write carries req's resourceVersion, so the API
// server takes it only over exactly the version req is; a conflict (the
// request changed since) is errStale, and the caller decides again on a
// fresh read rather than redo the change on a version nobody decided on.
func (c *Controller) updateStatusOnce(ctx context.Context, req *fencingv1alpha1.FencingRequest, change func(*fencingv1alpha1.FencingRequest) (bool, error)) (*fencingv1alpha1.FencingRequest, error) {
	r := req.DeepCopy()
	if write, err := change(r); err != nil || !write {
		return r, err
	}
	out, err := c.cfg.Client.FencingV1alpha1().FencingRequests().UpdateStatus(ctx, r, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("updating status of FencingRequest %s at resourceVersion %s: %w: %w", req.Name, req.ResourceVersion, errStale, err)
	} else if err != nil {
		return nil, fmt.Errorf("updating status of FencingRequest %s: %w", req.Name, err)
	}
	return out, nil
}

// startAttempt appends a running attempt (no result, no end), dropping the
// oldest beyond MaxFenceAttempts. A request that left phase Fencing or
// lost condition Required is not fenced further (errAborted).
//
// first is set for the round's first attempt: req is then the version
// Decide ran the round on, and the write is made on it alone
// (updateStatusOnce), so that no power action follows a decision taken on
// a stale cache. Later attempts start from the round's last write and keep
// updateStatus's retry.
func (c *Controller) startAttempt(ctx context.Context, req *fencingv1alpha1.FencingRequest, a fencingv1alpha1.FenceAttempt, first bool) (*fencingv1alpha1.FencingRequest, error) {
	change := func(r *fencingv1alpha1.FencingRequest) (bool, error) {
		if r.Status.Phase != fencingv1alpha1.FencingPhaseFencing || !meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.FencingRequestRequired) {
			return false, errAborted
		}
		r.Status.Attempts = appendAttempt(r.Status.Attempts, a)
		return true, nil
	}
	if first {
		return c.updateStatusOnce(ctx, req, change)
	}
	return c.updateStatus(ctx, req.Name, req, change)
}

// finishAttempt records the end of the attempt a started: its end time,
// result, read-back power state and message; failRound adds one to
// failedRounds in the same write.
func (c *Controller) finishAttempt(ctx context.Context, started *fencingv1alpha1.FencingRequest, a fencingv1alpha1.FenceAttempt, o outcome, failRound bool) (*fencingv1alpha1.FencingRequest, error) {
	end := metav1.NewTime(c.cfg.Now()).Rfc3339Copy()
	a.EndTime, a.Result, a.VerifiedPowerState, a.Message = &end, o.result, string(o.state), apitext.Truncate(o.message, maxMessage)
	return c.updateStatus(ctx, started.Name, started, func(r *fencingv1alpha1.FencingRequest) (bool, error) {
		i := -1
		for j, b := range r.Status.Attempts {
			if running(b) && b.Level == a.Level && b.FenceClass == a.FenceClass && b.StartTime.Equal(&a.StartTime) {
				i = j
			}
		}
		if i >= 0 {
			r.Status.Attempts[i] = a
		} else {
			r.Status.Attempts = appendAttempt(r.Status.Attempts, a)
		}
		if failRound {
			r.Status.FailedRounds++
		}
		return true, nil
	})
}

// markInterrupted ends every attempt that has no end: the agent that ran
// it stopped. On a request still fencing that is a failed round.
func (c *Controller) markInterrupted(ctx context.Context, name string) error {
	_, err := c.updateStatus(ctx, name, nil, func(r *fencingv1alpha1.FencingRequest) (bool, error) {
		if unfinished(r.Status.Attempts) == 0 {
			return false, nil
		}
		end := metav1.NewTime(c.cfg.Now()).Rfc3339Copy()
		for i := range r.Status.Attempts {
			if a := &r.Status.Attempts[i]; running(*a) {
				a.EndTime, a.Result, a.Message = &end, fencingv1alpha1.FenceAttemptFailed, InterruptedMessage
			}
		}
		if r.Status.Phase == fencingv1alpha1.FencingPhaseFencing {
			r.Status.FailedRounds++
		}
		return true, nil
	})
	return err
}

// countFailedRound adds one to failedRounds.
func (c *Controller) countFailedRound(ctx context.Context, name string) (*fencingv1alpha1.FencingRequest, error) {
	return c.updateStatus(ctx, name, nil, func(r *fencingv1alpha1.FencingRequest) (bool, error) {
		r.Status.FailedRounds++
		return true, nil
	})
}

// appendAttempt appends a, keeping the newest MaxFenceAttempts.
func appendAttempt(attempts []fencingv1alpha1.FenceAttempt, a fencingv1alpha1.FenceAttempt) []fencingv1alpha1.FenceAttempt {
	attempts = append(attempts, a)
	if n := len(attempts) - fencingv1alpha1.MaxFenceAttempts; n > 0 {
		attempts = attempts[n:]
	}
	return attempts
}
