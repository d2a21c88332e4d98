package app

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/component/events"
	"fenceline.io/fenceline/pkg/component/kubeclient"
	"fenceline.io/fenceline/pkg/fenceagent/probe"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencingscheme "fenceline.io/fenceline/pkg/generated/clientset/versioned/scheme"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

func init() {
	// Events name a FenceTarget by kind: the recorder's scheme must know
	// the fencing types.
	utilruntime.Must(fencingscheme.AddToScheme(scheme.Scheme))
}

// UserAgent is the user agent of the named client: "probe",
// "shared-informers", "events", "leader-election".
func UserAgent(name string) string { return Component + "/" + name }

// runProbe starts the informers and runs the probe until ctx ends.
func runProbe(ctx context.Context, base *rest.Config, m *probe.Metrics, opts Options) error {
	logger := klog.FromContext(ctx)
	informerCfg := kubeclient.WithUserAgent(base, UserAgent("shared-informers"))
	kube, err := kubernetes.NewForConfig(informerCfg)
	if err != nil {
		return fmt.Errorf("creating Kubernetes client for the informers: %w", err)
	}
	fencingInf, err := versioned.NewForConfig(crdConfig(informerCfg))
	if err != nil {
		return fmt.Errorf("creating fencing client for the informers: %w", err)
	}
	if kubeclient.WaitForAPIServer(ctx, kube.Discovery().RESTClient(), kubeclient.DefaultAPIWait) != nil {
		return nil // only the end of ctx stops the wait
	}
	probeClient, err := versioned.NewForConfig(crdConfig(kubeclient.WithUserAgent(base, UserAgent("probe"))))
	if err != nil {
		return fmt.Errorf("creating fencing client: %w", err)
	}
	eventClient, err := kubernetes.NewForConfig(kubeclient.WithUserAgent(base, UserAgent("events")))
	if err != nil {
		return fmt.Errorf("creating events client: %w", err)
	}
	recorder, stopEvents := events.NewRecorder(ctx, eventClient, Component)
	defer stopEvents()

	ff := fencinginformers.NewSharedInformerFactoryWithOptions(fencingInf, opts.Resync, fencinginformers.WithTransform(dropManagedFields))
	// Only the credentials namespace: the RBAC grants Secrets there only.
	sf := informers.NewSharedInformerFactoryWithOptions(kube, opts.Resync, informers.WithNamespace(opts.CredentialsNamespace), informers.WithTransform(dropManagedFields))
	ctrl, err := probe.New(probe.Config{
		Client:               probeClient,
		Targets:              ff.Fencing().V1alpha1().FenceTargets(),
		Classes:              ff.Fencing().V1alpha1().FenceClasses(),
		Secrets:              sf.Core().V1().Secrets(),
		CredentialsNamespace: opts.CredentialsNamespace,
		Recorder:             recorder,
		Metrics:              m,
		Interval:             opts.ProbeInterval,
		Timeout:              opts.ProbeTimeout,
	})
	if err != nil {
		return err
	}
	ff.Start(ctx.Done())
	defer ff.Shutdown()
	sf.Start(ctx.Done())
	defer sf.Shutdown()
	logger.Info("Fence agent running", "probeInterval", opts.ProbeInterval, "credentialsNamespace", opts.CredentialsNamespace)
	ctrl.Run(ctx, opts.Workers)
	return nil
}

// crdConfig is cfg speaking JSON: custom resources have no protobuf
// encoding, and the shared configuration asks for protobuf first.
func crdConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	return c
}

// dropManagedFields trims what the caches keep.
func dropManagedFields(obj any) (any, error) {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok && a.GetObjectMeta() != nil {
		a.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}
