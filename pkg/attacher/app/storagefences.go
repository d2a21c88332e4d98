package app

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	k8smetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/attacher/storagefence"
	"fenceline.io/fenceline/pkg/component/events"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencingscheme "fenceline.io/fenceline/pkg/generated/clientset/versioned/scheme"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	"fenceline.io/fenceline/pkg/kube/access"
)

func init() {
	// Events name StorageFences by kind: the recorder's scheme must know
	// the fencing types.
	utilruntime.Must(fencingscheme.AddToScheme(scheme.Scheme))
}

// storageFenceRules are what publishing the storage's fences needs beyond
// the attacher's other rules (docs/attacher.md, "Storage fences").
var storageFenceRules = append(verbs("storagefences", fencingv1alpha1.GroupName, "get", "list", "watch", "create", "update", "delete"),
	access.Rule{Verb: "update", Group: fencingv1alpha1.GroupName, Resource: "storagefences", Subresource: "status"})

// storageFences is the publisher of the driver's storage fences, with its
// informer factory and the stop of its Events.
type storageFences struct {
	ctrl    *storagefence.Controller
	factory fencinginformers.SharedInformerFactory
	stop    func()
}

// start runs the publisher beside the attacher's controller; the returned
// function stops it and waits for it. A nil publisher does nothing.
func (s *storageFences) start(ctx context.Context) (stop func()) {
	if s == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.factory.Start(ctx.Done())
		defer s.factory.Shutdown()
		s.ctrl.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

// fencedDetach tells the publisher a fence was just set.
func (s *storageFences) fencedDetach() {
	if s != nil {
		s.ctrl.FencedDetach()
	}
}

// close stops the publisher's Events.
func (s *storageFences) close() {
	if s != nil {
		s.stop()
	}
}

// newStorageFences sets up the publisher when the driver lists its fences,
// --storage-fence-interval is above 0, the StorageFence API is installed
// and RBAC allows it; otherwise it says at default verbosity why there is
// none and returns nil. It must run before factory starts (it adds the
// Node and CSINode informers' indexes).
func newStorageFences(ctx context.Context, opts Options, config *rest.Config, client kubernetes.Interface, d *driver, blind bool, factory informers.SharedInformerFactory, registry k8smetrics.KubeRegistry) (*storageFences, error) {
	logger := klog.FromContext(ctx)
	switch {
	case !d.caps.Fence.ListFences:
		logger.V(2).Info("Storage fences are not published: the driver does not advertise LIST_FENCES")
		return nil, nil
	case opts.StorageFenceInterval <= 0:
		logger.Info("Storage fences are not published: --storage-fence-interval is 0")
		return nil, nil
	case blind:
		logger.Error(nil, "Storage fences are not published: the attacher runs blind (see above)")
		return nil, nil
	}
	resources, err := client.Discovery().ServerResourcesForGroupVersion(fencingv1alpha1.SchemeGroupVersion.String())
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("discover the StorageFence API: %w", err)
	}
	if resources == nil || !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "storagefences" }) {
		logger.Error(nil, "Storage fences are not published: the StorageFence API is not installed; apply Fenceline's CRDs and restart the attacher")
		return nil, nil
	}
	if missing, err := access.Missing(ctx, client.AuthorizationV1(), storageFenceRules); err != nil || len(missing) > 0 {
		logger.Error(err, "Storage fences are not published: RBAC does not allow them; restart the attacher after granting them", "missing", access.Join(missing))
		return nil, nil
	}
	fencing, err := versioned.NewForConfig(kubeclient.JSON(config))
	if err != nil {
		return nil, fmt.Errorf("create the StorageFence client: %w", err)
	}
	eventClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client for StorageFence Events: %w", err)
	}
	recorder, stop := events.NewRecorder(ctx, eventClient, userAgent)
	ff := fencinginformers.NewSharedInformerFactory(fencing, opts.Resync)
	ctrl, err := storagefence.New(storagefence.Config{
		Driver: d.name, Conn: d.conn, Caps: d.caps.Fence, Fencing: fencing, Kube: client, Recorder: recorder,
		Interval: opts.StorageFenceInterval, Timeout: max(opts.Timeout, time.Second), Metrics: storagefence.NewMetrics(registry),
	}, ff.Fencing().V1alpha1().StorageFences(), factory.Core().V1().Nodes(), factory.Storage().V1().CSINodes())
	if err != nil {
		stop()
		return nil, fmt.Errorf("create the storage fence publisher: %w", err)
	}
	return &storageFences{ctrl: ctrl, factory: ff, stop: stop}, nil
}
