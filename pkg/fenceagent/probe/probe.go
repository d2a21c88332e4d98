// Package probe is the fence agent's FenceTarget probe: every interval
// (default 60 s, with jitter) it asks each endpoint of each FenceTarget for
// its power status, read-only, and writes the Reachable condition, the
// power state and the probe time to the target's status, so that a broken
// fencing device (a changed password, a dead BMC, a wrong address) shows
// before the node it guards dies. A power check asked on a target (the
// fenceline.io/power-check annotation, written by fenceline-controller when
// the node misses a Lease renewal) is probed at once and answered in
// status.powerCheck. It never powers anything off or on.
package probe

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/fenceagent/devices"
	"fenceline.io/fenceline/pkg/fenceagent/power"
	"fenceline.io/fenceline/pkg/fenceagent/queue"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions/fencing/v1alpha1"
	fencinglisters "fenceline.io/fenceline/pkg/generated/listers/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/names"
)

// Name is the controller's name in logs and workqueue metrics.
const Name = "fencetarget-probe"

// Defaults of Config.
const (
	DefaultInterval = 60 * time.Second
	// DefaultTimeout bounds one endpoint's query beyond the device's own
	// bound (the class's action timeout).
	DefaultTimeout = 30 * time.Second
	// jitterFactor spreads the probes of many targets over the interval.
	jitterFactor = 0.1
)

// The Events of a probe, on the FenceTarget.
const (
	EventUnreachable = "FenceDeviceUnreachable"
	EventReachable   = "FenceDeviceReachable"
)

// Builder builds an endpoint's device; devices.Build in production.
type Builder = devices.BuildFunc

// Config wires a Controller.
type Config struct {
	Client  versioned.Interface
	Targets fencinginformers.FenceTargetInformer
	Classes fencinginformers.FenceClassInformer
	// Secrets watches CredentialsNamespace only: credential Secrets must
	// live there.
	Secrets              coreinformers.SecretInformer
	CredentialsNamespace string
	Recorder             record.EventRecorder
	Metrics              *Metrics
	// Interval is the time between two probes of a target; Timeout bounds
	// one endpoint's query. Zero means the default.
	Interval, Timeout time.Duration
	// Build and Now are for tests; nil means devices.Build and time.Now.
	Build Builder
	Now   func() time.Time
}

// Controller probes FenceTargets.
type Controller struct {
	cfg     Config
	targets fencinglisters.FenceTargetLister
	classes fencinglisters.FenceClassLister
	secrets corelisters.SecretLister
	source  devices.Source
	queue   *queue.Queue
	synced  []cache.InformerSynced
}

// New creates the controller and registers its informer handlers; call it
// before the informers start.
func New(cfg Config) (*Controller, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{
		cfg:     cfg,
		targets: cfg.Targets.Lister(),
		classes: cfg.Classes.Lister(),
		secrets: cfg.Secrets.Lister(),
		source:  devices.Source{Classes: cfg.Classes.Lister(), Secrets: cfg.Secrets.Lister(), Namespace: cfg.CredentialsNamespace, Build: cfg.Build},
	}
	c.queue = queue.New(Name, "fenceTarget", c.sync)
	var err error
	c.synced, err = queue.AddHandlers(Name,
		queue.Watch{Informer: cfg.Targets.Informer(), Handler: c.targetHandler()},
		queue.Watch{Informer: cfg.Classes.Informer(), Handler: c.dependentHandler(c.referencesClass)},
		queue.Watch{Informer: cfg.Secrets.Informer(), Handler: c.dependentHandler(c.referencesSecret)})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// targetHandler enqueues a target when it is added, deleted, its spec
// changes or a power check is asked that is not answered yet; the probe's
// own status writes do not enqueue it. An ask is probed at once, whatever
// the interval.
func (c *Controller) targetHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: c.queue.Enqueue,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*fencingv1alpha1.FenceTarget)
			n, ok2 := cur.(*fencingv1alpha1.FenceTarget)
			if !ok1 || !ok2 || o.Generation != n.Generation || Unanswered(n) {
				c.queue.Enqueue(cur)
			}
		},
		DeleteFunc: c.queue.Enqueue,
	}
}

// Unanswered reports whether t carries a power-check ask that its status
// does not answer yet.
func Unanswered(t *fencingv1alpha1.FenceTarget) bool {
	ask := t.Annotations[names.PowerCheckAnnotation]
	return ask != "" && (t.Status.PowerCheck == nil || t.Status.PowerCheck.Token != ask)
}

// dependentHandler enqueues the targets for which refers(target, obj). A
// resync is no change: the target's own requeue probes it.
func (c *Controller) dependentHandler(refers func(*fencingv1alpha1.FenceTarget, metav1.Object) bool) cache.ResourceEventHandler {
	return queue.OnChange(func(o metav1.Object) {
		targets, err := c.targets.List(labels.Everything())
		if err != nil {
			return
		}
		for _, t := range targets {
			if refers(t, o) {
				c.queue.Add(t.Name)
			}
		}
	})
}

// referencesClass: an endpoint of t uses class o.
func (c *Controller) referencesClass(t *fencingv1alpha1.FenceTarget, o metav1.Object) bool {
	for _, ep := range t.Spec.Endpoints {
		if ep.FenceClassName == o.GetName() {
			return true
		}
	}
	return false
}

// referencesSecret: an endpoint of t takes its credentials from Secret o.
func (c *Controller) referencesSecret(t *fencingv1alpha1.FenceTarget, o metav1.Object) bool {
	for _, ep := range t.Spec.Endpoints {
		class, _ := c.classes.Get(ep.FenceClassName)
		if ref, err := devices.SecretRef(class, ep); err == nil && ref.Namespace == o.GetNamespace() && ref.Name == o.GetName() {
			return true
		}
	}
	return false
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.queue.Run(ctx, workers, c.synced, "Probing FenceTargets", "interval", c.cfg.Interval)
}

// Sync probes one target now; exported for tests.
func (c *Controller) Sync(ctx context.Context, name string) error { return c.sync(ctx, name) }

// sync probes the target name and writes its status; a target that still
// exists is queued again after the interval, with jitter.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("fenceTarget", name)
	ctx = klog.NewContext(ctx, logger)
	t, err := c.targets.Get(name)
	if apierrors.IsNotFound(err) {
		c.cfg.Metrics.Reachable.DeleteLabelValues(name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting FenceTarget %s: %w", name, err)
	}
	ask := t.Annotations[names.PowerCheckAnnotation]
	results := c.probe(ctx, t)
	d := Decide(t.Status, t.Generation, ask, results, c.cfg.Now(), c.cfg.Interval)
	c.observe(t, d)
	if Unanswered(t) {
		c.cfg.Metrics.PowerChecks.WithLabelValues(string(d.Status.PowerState)).Inc()
		logger.V(2).Info("Answered a power check", "token", ask, "powerState", d.Status.PowerState, "reason", d.Reason)
	}
	if d.Write {
		cp := t.DeepCopy()
		cp.Status = d.Status
		if _, err := c.cfg.Client.FencingV1alpha1().FenceTargets().UpdateStatus(ctx, cp, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("updating status of FenceTarget %s: %w", name, err)
		}
	}
	logger.V(4).Info("Probed", "reason", d.Reason, "powerState", d.Status.PowerState, "wrote", d.Write)
	c.queue.AddAfter(name, wait.Jitter(c.cfg.Interval, jitterFactor))
	return nil
}

// fieldManager names the probe in managedFields.
const fieldManager = "fenceline-fence-agent"

// observe records the metrics, the log line and the Event of a decision.
func (c *Controller) observe(t *fencingv1alpha1.FenceTarget, d Decision) {
	c.cfg.Metrics.Probes.WithLabelValues(d.Reason).Inc()
	v := 0.0
	if d.Reason == devices.ReasonReachable {
		v = 1
	}
	c.cfg.Metrics.Reachable.WithLabelValues(t.Name).Set(v)
	switch d.Transition {
	case BecameUnreachable:
		c.cfg.Recorder.Eventf(t, corev1.EventTypeWarning, EventUnreachable, "Fence device check failed (%s): %s", d.Reason, d.Message)
	case BecameReachable:
		c.cfg.Recorder.Eventf(t, corev1.EventTypeNormal, EventReachable, "Fence device reachable again: %s", d.Message)
	}
}

// probe queries every endpoint of t, one after the other.
func (c *Controller) probe(ctx context.Context, t *fencingv1alpha1.FenceTarget) []EndpointResult {
	results := make([]EndpointResult, 0, len(t.Spec.Endpoints))
	for _, ep := range t.Spec.Endpoints {
		results = append(results, c.probeEndpoint(ctx, ep))
	}
	return results
}

// probeEndpoint builds the endpoint's device and reads its power status.
// The error kept is scrubbed of the credentials.
func (c *Controller) probeEndpoint(ctx context.Context, ep fencingv1alpha1.FenceEndpoint) EndpointResult {
	r := EndpointResult{FenceClassName: ep.FenceClassName, State: power.StateUnknown}
	e, err := c.source.Device(ep)
	if err != nil {
		r.Err = err
		return r
	}
	qctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	r.State, err = e.Device.Status(qctx)
	c.cfg.Metrics.Duration.WithLabelValues(string(e.Class.Spec.Method)).Observe(time.Since(start).Seconds())
	r.Err = devices.Scrub(err, e.Secret)
	return r
}
