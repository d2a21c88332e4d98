package nodefencing

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/controller/stormguard"
)

// loadGuard returns the policy's storm-guard state: the one kept in
// memory, or, the first time, the one saved in fresh (the policy as the
// API server has it), restored.
func (c *Controller) loadGuard(ctx context.Context, fresh *fencingv1alpha1.FencePolicy, cooldown time.Duration, now time.Time) guardState {
	if st, ok := c.guards[fresh.Name]; ok {
		return st
	}
	bucket, storm, why := stormguard.Restore(SavedGuard(fresh.Status.StormGuard), cooldown, now)
	klog.FromContext(ctx).Info("Storm guard state restored", "policy", fresh.Name, "state", why)
	return guardState{bucket: bucket, storm: storm}
}

// saveGuard writes the state after a decision into the policy's status,
// before the decision takes effect: a token is spent in the API before the
// fence it allows starts. It starts from cur, the policy as just read, and
// reads it again only on a conflict.
func (c *Controller) saveGuard(ctx context.Context, cur *fencingv1alpha1.FencePolicy, st guardState, now time.Time) error {
	policies := c.cfg.Client.FencingV1alpha1().FencePolicies()
	status := GuardStatus(stormguard.Save(st.bucket, st.storm, now))
	next := cur.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if next == nil {
			var err error
			if next, err = policies.Get(ctx, cur.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		next.Status.StormGuard = status
		_, err := policies.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			next = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("saving the storm-guard state of FencePolicy %s: %w", cur.Name, err)
	}
	return nil
}

// SavedGuard reads a policy's status into stormguard's terms; nil when the
// status holds no state. A field that is missing makes the state
// unreadable (stormguard.Restore then takes the safe reading).
func SavedGuard(s *fencingv1alpha1.StormGuardStatus) *stormguard.Saved {
	if s == nil {
		return nil
	}
	saved := &stormguard.Saved{Tokens: math.NaN(), StormActive: s.StormActive,
		BucketTime: micro(s.BucketTime), StormSince: micro(s.StormStartTime), LastExit: micro(s.LastStormEndTime), Written: micro(s.UpdateTime)}
	if s.Tokens != nil {
		saved.Tokens = float64(s.Tokens.MilliValue()) / 1000
	}
	return saved
}

// GuardStatus is the status form of a saved state; tokens are rounded
// down to a thousandth, so the saved bucket never holds more than the
// running one.
func GuardStatus(s stormguard.Saved) *fencingv1alpha1.StormGuardStatus {
	return &fencingv1alpha1.StormGuardStatus{
		Tokens:           resource.NewMilliQuantity(int64(math.Floor(s.Tokens*1000)), resource.DecimalSI),
		BucketTime:       microTime(s.BucketTime),
		StormActive:      s.StormActive,
		StormStartTime:   microTime(s.StormSince),
		LastStormEndTime: microTime(s.LastExit),
		UpdateTime:       microTime(s.Written),
	}
}

func micro(t *metav1.MicroTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	m := metav1.NewMicroTime(t)
	return &m
}
