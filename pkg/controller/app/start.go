package app

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	v1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/events"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencingscheme "fenceline.io/fenceline/pkg/generated/clientset/versioned/scheme"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

func init() {
	// Events name FencingRequests by kind: the recorder's scheme must know
	// the fencing types.
	utilruntime.Must(fencingscheme.AddToScheme(scheme.Scheme))
}

// UserAgent is the user agent of the named controller's requests, and of
// the shared informers' ("shared-informers") and leader election's
// ("leader-election"), as kube-controller-manager names its clients.
func UserAgent(name string) string { return Component + "/" + name }

// runControllers sets up the enabled controllers, each with a client of
// its own, starts the shared informers, and runs the controllers until ctx
// ends. It returns once every controller has stopped.
func runControllers(ctx context.Context, base *rest.Config, m processMetrics, opts Options, enabled map[string]bool) error {
	logger := klog.FromContext(ctx)
	client, err := kubernetes.NewForConfig(kubeclient.WithUserAgent(base, UserAgent("shared-informers")))
	if err != nil {
		return fmt.Errorf("creating Kubernetes client for the informers: %w", err)
	}
	if kubeclient.WaitForAPIServer(ctx, client.Discovery().RESTClient(), kubeclient.DefaultAPIWait) != nil {
		return nil // only the end of ctx (a signal, a lost lease) stops the wait
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync, informers.WithTransform(trimForCache))
	// Node Leases live in one namespace; watching only that one keeps the
	// cache (and the RBAC) to what force-eviction reads.
	leaseFactory := informers.NewSharedInformerFactoryWithOptions(client, opts.Resync,
		informers.WithNamespace(v1.NamespaceNodeLease), informers.WithTransform(kubeclient.DropManagedFields))
	fencingInformerClient, err := versioned.NewForConfig(kubeclient.JSON(kubeclient.WithUserAgent(base, UserAgent("shared-informers"))))
	if err != nil {
		return fmt.Errorf("creating fencing client for the informers: %w", err)
	}
	fencingFactory := fencinginformers.NewSharedInformerFactoryWithOptions(fencingInformerClient, opts.Resync, fencinginformers.WithTransform(kubeclient.DropManagedFields))
	evidence := NewEvidence(client, factory, opts.Resync)
	var ctrls []Controller
	for _, d := range Controllers {
		if !enabled[d.Name] {
			continue
		}
		c, stopEvents, err := newController(ctx, d, base, ControllerContext{Informers: factory, NodeLeases: leaseFactory, Fencing: fencingFactory, Options: opts, Settings: opts.Settings[d.Name], Metrics: m.own[d.Name], Evidence: evidence}, m.shared)
		if errors.Is(err, errNotServed) {
			logger.Error(err, "Controller not started", "controller", d.Name)
			continue
		}
		if err != nil {
			return fmt.Errorf("setting up controller %s: %w", d.Name, err)
		}
		// Deferred: Events still recorded by a sync that ends at shutdown
		// are written before Run returns.
		defer stopEvents()
		logger.Info("Controller enabled", "controller", d.Name, "userAgent", UserAgent(d.Name), "dryRun", opts.DryRun)
		ctrls = append(ctrls, c)
	}
	if len(ctrls) == 0 {
		return errors.New("no controller enabled")
	}
	for _, f := range []informers.SharedInformerFactory{factory, leaseFactory} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	fencingFactory.Start(ctx.Done())
	defer fencingFactory.Shutdown()
	if err := waitForCaches(ctx, ctrls, fencingFactory, factory, leaseFactory); err != nil || ctx.Err() != nil {
		return err
	}
	logger.Info("Caches synced; controllers running")
	var wg sync.WaitGroup
	for _, c := range ctrls {
		wg.Go(func() { c.Run(ctx, opts.Workers) })
	}
	wg.Wait()
	return nil
}

// newController creates the controller d with its own client, Event
// recorder and actuator, all with the user agent of d. stopEvents flushes
// and stops its Events.
func newController(ctx context.Context, d Descriptor, base *rest.Config, cc ControllerContext, m *metrics.Metrics) (c Controller, stopEvents func(), err error) {
	cfg := kubeclient.WithUserAgent(base, UserAgent(d.Name))
	if cc.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, nil, err
	}
	if cc.FencingClient, err = versioned.NewForConfig(kubeclient.JSON(cfg)); err != nil {
		return nil, nil, err
	}
	if cc.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, nil, err
	}
	// Events go through a second client, with a rate limiter of its own,
	// so that they never delay a deletion.
	eventClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	recorder, stopEvents := events.NewRecorder(ctx, eventClient, Component)
	cc.Actuator = &actuator.Actuator{Client: cc.Client, Recorder: recorder, Metrics: m, DryRun: cc.Options.DryRun}
	if c, err = d.New(cc); err != nil {
		stopEvents()
		return nil, nil, err
	}
	return c, stopEvents, nil
}

// cacheSyncer is an informer factory of any client set.
type cacheSyncer interface {
	WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool
}

// waitForCaches waits for the shared informers and then for the
// controllers' own caches. A wait cut short by ctx is no error.
func waitForCaches(ctx context.Context, ctrls []Controller, factories ...cacheSyncer) error {
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("informer cache for %v did not sync", typ)
			}
		}
	}
	for _, c := range ctrls {
		if s, ok := c.(cacheStarter); ok {
			if err := s.StartCaches(ctx); err != nil || ctx.Err() != nil {
				return err
			}
		}
	}
	return nil
}

// trimForCache drops managed fields (kubeclient.DropManagedFields), and keeps of a pod's spec only what a
// controller decides by: its node, its tolerations and its volumes. The
// containers and the rest are about half of a pod's memory, and pods are
// most of the cache (50,000 pods took the process to 580 MB). A cached pod
// is written back only through its status, which makes the API server keep
// the stored spec, so nothing of the spec is lost; metadata and status,
// which a status update does write, stay whole.
func trimForCache(obj any) (any, error) {
	if pod, ok := obj.(*v1.Pod); ok {
		pod.Spec = v1.PodSpec{NodeName: pod.Spec.NodeName, Tolerations: pod.Spec.Tolerations, Volumes: pod.Spec.Volumes}
	}
	return kubeclient.DropManagedFields(obj)
}

var _ cache.TransformFunc = trimForCache
