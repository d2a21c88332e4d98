// Package heartbeat keeps a Lease of fenceline-attacher's own alive while
// this replica serves the driver, so that fenceline-controller can see
// positive, fresh evidence that a Fenceline attacher (and not the upstream
// external-attacher, which shares the leader-election Lease) will process
// the driver's detaches, and whether it can fence them.
//
// The Lease is names.AttacherHeartbeatLeaseName(driver) in the attacher's
// namespace. It carries the label names.DriverLabel (sanitized driver name)
// and the annotations names.HeartbeatDriverAnnotation (exact driver name),
// names.HeartbeatUnpublishFenceAnnotation and names.HeartbeatVersionAnnotation.
// spec.renewTime is renewed every Interval; spec.leaseDurationSeconds is the
// freshness bound readers apply (cutoff.AttacherServes).
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/names"
)

// firstRetry is the first wait after a failed renewal; it doubles up to
// Config.Interval.
const firstRetry = 200 * time.Millisecond

// Config says which Lease to keep alive and how.
type Config struct {
	// Client writes the Lease.
	Client coordinationclient.LeasesGetter
	// Namespace is the attacher's namespace, where the Lease lives.
	Namespace string
	// Driver is the exact CSI driver name.
	Driver string
	// UnpublishFence is whether the driver advertised UNPUBLISH_FENCE.
	UnpublishFence bool
	// Version is the attacher's version.
	Version string
	// Identity is written as spec.holderIdentity, for humans.
	Identity string
	// Interval is how often the Lease is renewed.
	Interval time.Duration
	// Duration is written as spec.leaseDurationSeconds (whole seconds,
	// rounded up): how long readers trust a renewal. It must exceed
	// Interval so that one slow renewal does not make the evidence flap.
	Duration time.Duration
	// Metrics, if not nil, counts renewals.
	Metrics *Metrics
	// Clock defaults to the real clock; tests inject a fake one.
	Clock clock.Clock
}

// Validate reports settings under which the heartbeat cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil || c.Namespace == "" || c.Driver == "" {
		errs = append(errs, errors.New("heartbeat needs a client, a namespace and a driver name"))
	}
	if c.Interval <= 0 || c.Duration <= c.Interval {
		errs = append(errs, fmt.Errorf("heartbeat interval (%v) must be positive and below its duration (%v)", c.Interval, c.Duration))
	}
	return errors.Join(errs...)
}

// Name returns the Lease's name.
func (c Config) Name() string { return names.AttacherHeartbeatLeaseName(c.Driver) }

// Start runs Run in the background. stop cancels it and waits until it has
// returned, that is until the Lease has been released.
func Start(ctx context.Context, cfg Config) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, cfg); err != nil {
			klog.FromContext(ctx).Error(err, "Heartbeat not started")
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// Run renews the Lease until ctx ends, then deletes it, so that evidence of
// a Fenceline attacher disappears as soon as this one stops leading rather
// than when the Lease expires. A failed renewal is retried with exponential
// backoff, capped at Interval. Run returns an error only for an invalid
// Config.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(cfg.Namespace, cfg.Name()))
	ctx = klog.NewContext(ctx, logger)
	h := &heartbeater{cfg: cfg, leases: cfg.Client.Leases(cfg.Namespace)}
	logger.Info("Heartbeat started", "interval", cfg.Interval, "leaseDurationSeconds", h.durationSeconds(), "unpublishFence", cfg.UnpublishFence)
	backoff := h.newBackoff()
	for {
		next := cfg.Interval
		switch err := h.renew(ctx); {
		case err == nil:
			backoff = h.newBackoff()
			cfg.Metrics.renewed(true, h.lease.Spec.RenewTime.Time)
			logger.V(5).Info("Heartbeat renewed")
		case ctx.Err() == nil: // not merely interrupted by the stop
			next = backoff.Step()
			cfg.Metrics.renewed(false, time.Time{})
			logger.Error(err, "Heartbeat renewal failed", "retryIn", next)
		}
		timer := cfg.Clock.NewTimer(next)
		select {
		case <-ctx.Done():
			timer.Stop()
			h.release(ctx)
			return nil
		case <-timer.C():
		}
	}
}

// heartbeater holds the Lease as last written, so that a renewal is one
// Update with optimistic concurrency and no informer is needed.
type heartbeater struct {
	cfg    Config
	leases coordinationclient.LeaseInterface
	lease  *coordinationv1.Lease
}

func (h *heartbeater) newBackoff() wait.Backoff {
	return wait.Backoff{Duration: min(firstRetry, h.cfg.Interval), Factor: 2, Jitter: 0.1, Steps: 64, Cap: h.cfg.Interval}
}

func (h *heartbeater) durationSeconds() int32 {
	return int32(min((h.cfg.Duration+time.Second-1)/time.Second, 1<<31-1))
}

// renew writes renewTime = now, creating the Lease if needed. Any failed
// write forgets the cached copy, so the next attempt starts from a fresh
// read (a conflict means someone else wrote it).
func (h *heartbeater) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Interval)
	defer cancel()
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	if h.lease == nil {
		cur, err := h.leases.Get(ctx, h.cfg.Name(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := h.leases.Create(ctx, h.desired(&coordinationv1.Lease{}, now), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create heartbeat Lease: %w", err)
			}
			h.lease = created
			return nil
		case err != nil:
			return fmt.Errorf("read heartbeat Lease: %w", err)
		}
		// Two driver names may sanitize to the same Lease name; never
		// overwrite another driver's evidence with ours.
		if d := cur.Annotations[names.HeartbeatDriverAnnotation]; d != "" && d != h.cfg.Driver {
			return fmt.Errorf("heartbeat Lease %s/%s belongs to driver %q, not %q", cur.Namespace, cur.Name, d, h.cfg.Driver)
		}
		h.lease = cur
	}
	updated, err := h.leases.Update(ctx, h.desired(h.lease, now), metav1.UpdateOptions{})
	if err != nil {
		h.lease = nil
		return fmt.Errorf("renew heartbeat Lease: %w", err)
	}
	h.lease = updated
	return nil
}

// desired returns a copy of base with this attacher's identity, evidence
// and renewTime now. Labels and annotations of others are kept.
func (h *heartbeater) desired(base *coordinationv1.Lease, now metav1.MicroTime) *coordinationv1.Lease {
	l := base.DeepCopy()
	l.Name, l.Namespace = h.cfg.Name(), h.cfg.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[names.DriverLabel] = names.SanitizeDriverName(h.cfg.Driver)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[names.HeartbeatDriverAnnotation] = h.cfg.Driver
	l.Annotations[names.HeartbeatUnpublishFenceAnnotation] = strconv.FormatBool(h.cfg.UnpublishFence)
	l.Annotations[names.HeartbeatVersionAnnotation] = h.cfg.Version
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != h.cfg.Identity {
		if l.Spec.HolderIdentity != nil {
			l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		}
		l.Spec.HolderIdentity = ptr.To(h.cfg.Identity)
		l.Spec.AcquireTime = &now
	}
	l.Spec.LeaseDurationSeconds = ptr.To(h.durationSeconds())
	l.Spec.RenewTime = &now
	return l
}

// release deletes the Lease if it is still the version this heartbeater
// wrote: a newer write is another attacher's evidence and stays.
func (h *heartbeater) release(ctx context.Context) {
	if h.lease == nil {
		return
	}
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(h.cfg.Interval, 5*time.Second))
	defer cancel()
	err := h.leases.Delete(ctx, h.lease.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &h.lease.UID, ResourceVersion: &h.lease.ResourceVersion},
	})
	switch {
	case err == nil:
		logger.Info("Heartbeat stopped; Lease deleted")
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		logger.Info("Heartbeat stopped; Lease already taken over or gone")
	default:
		logger.Error(err, "Heartbeat stopped; deleting the Lease failed, it goes stale instead")
	}
	h.lease = nil
}
