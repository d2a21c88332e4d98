package tainteviction

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
)

// UpstreamController is kube-controller-manager's name for its taint
// eviction controller: the source component of its Events, and the name to
// disable with --controllers=*,-taint-eviction-controller.
const UpstreamController = "taint-eviction-controller"

// UpstreamWindow is how long one Event of upstream's controller keeps
// Fenceline's standing down: it must have been disabled for that long
// before Fenceline's evicts again.
const UpstreamWindow = 10 * time.Minute

// upstreamWatch is the self-check: it watches for the TaintManagerEvent
// Events of kube-controller-manager's own taint-eviction-controller. Two
// taint evictions at once would evict every pod twice over, with the
// upstream one graceful-deleting stateful pods of dead nodes into an
// endless Terminating; so while upstream's is evidently running, this one
// evicts nothing and says so loudly (Event, metric, error log).
type upstreamWatch struct {
	informer cache.SharedIndexInformer
	act      *actuator.Actuator
	metrics  *Metrics
	now      func() time.Time

	mu    sync.Mutex
	until time.Time
}

func newUpstreamWatch(client kubernetes.Interface, resync time.Duration, act *actuator.Actuator, m *Metrics, now func() time.Time) *upstreamWatch {
	w := &upstreamWatch{act: act, metrics: m, now: now}
	sel := fields.AndSelectors(
		fields.OneTermEqualSelector("reason", actuator.EventTaintManagerEviction),
		fields.OneTermEqualSelector("source", UpstreamController),
	)
	events := client.CoreV1().Events(v1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel.String()
			return events.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel.String()
			return events.Watch(ctx, o)
		},
	}
	w.informer = cache.NewSharedIndexInformer(lw, &v1.Event{}, resync, cache.Indexers{})
	return w
}

// Start runs the Event informer and waits for its first list.
func (w *upstreamWatch) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	seen := func(obj any) {
		if ev, ok := obj.(*v1.Event); ok {
			w.observe(logger, ev)
		}
	}
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return err
	}
	go w.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) && ctx.Err() == nil {
		return errors.New("the self-check's Event cache did not sync")
	}
	return nil
}

// observe extends the stand-down for an Event of upstream's controller.
func (w *upstreamWatch) observe(logger klog.Logger, ev *v1.Event) {
	if ev.Source.Component != UpstreamController || ev.Reason != actuator.EventTaintManagerEviction {
		return
	}
	last := eventTime(ev)
	now := w.now()
	if last.IsZero() || now.Sub(last) > UpstreamWindow {
		return
	}
	w.mu.Lock()
	wasActive := now.Before(w.until)
	if until := last.Add(UpstreamWindow); until.After(w.until) {
		w.until = until
	}
	w.mu.Unlock()
	w.metrics.setUpstream(true)
	if wasActive {
		return
	}
	logger.Error(nil, "kube-controller-manager's taint-eviction-controller is running as well; Fenceline's taint-eviction evicts nothing until it is disabled (--controllers=*,-taint-eviction-controller)",
		"event", klog.KObj(ev), "pod", ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name, "message", ev.Message)
	ref := ev.InvolvedObject.DeepCopy()
	w.act.Recorder.Eventf(ref, v1.EventTypeWarning, EventUpstreamActive,
		"kube-controller-manager's %s acted on this pod (%q) while Fenceline's taint-eviction is enabled: Fenceline's evicts nothing until upstream's is disabled with --controllers=*,-%s",
		UpstreamController, ev.Message, UpstreamController)
}

// Active reports whether upstream's controller was seen within the window,
// and until when the stand-down lasts.
func (w *upstreamWatch) Active(now time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	active := now.Before(w.until)
	if !active && !w.until.IsZero() {
		w.until = time.Time{}
		w.metrics.setUpstream(false)
	}
	return w.until, active
}

// eventTime is when the Event last happened.
func eventTime(ev *v1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}
