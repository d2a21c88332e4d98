package app

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
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
	"fenceline.io/fenceline/pkg/fenceagent/executor"
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

// UserAgent is the user agent of the named client: "probe", "executor",
// "shared-informers", "events", "leader-election".
func UserAgent(name string) string { return Component + "/" + name }

// metrics are the series of the probe and the executor.
type metrics struct {
	probe    *probe.Metrics
	executor *executor.Metrics
}

// runAgent starts the informers and runs the probe and the executor until
// ctx ends.
func runAgent(ctx context.Context, base *rest.Config, m metrics, opts Options) error {
	logger := klog.FromContext(ctx)
	cs, err := newClients(base)
	if err != nil {
		return err
	}
	if kubeclient.WaitForAPIServer(ctx, cs.kube.Discovery().RESTClient(), kubeclient.DefaultAPIWait) != nil {
		return nil // only the end of ctx stops the wait
	}
	recorder, stopEvents := events.NewRecorder(ctx, cs.events, Component)
	defer stopEvents()

	ff := fencinginformers.NewSharedInformerFactoryWithOptions(cs.fencing, opts.Resync, fencinginformers.WithTransform(kubeclient.DropManagedFields))
	// Only the credentials namespace: the RBAC grants Secrets there only.
	sf := informers.NewSharedInformerFactoryWithOptions(cs.kube, opts.Resync, informers.WithNamespace(opts.CredentialsNamespace), informers.WithTransform(kubeclient.DropManagedFields))
	nf := informers.NewSharedInformerFactoryWithOptions(cs.kube, opts.Resync, informers.WithTransform(nodeIdentity))
	fencing := ff.Fencing().V1alpha1()
	prober, err := probe.New(probe.Config{
		Client: cs.probe, Targets: fencing.FenceTargets(), Classes: fencing.FenceClasses(), Secrets: sf.Core().V1().Secrets(),
		CredentialsNamespace: opts.CredentialsNamespace, Recorder: recorder, Metrics: m.probe, Interval: opts.ProbeInterval, Timeout: opts.ProbeTimeout,
	})
	if err != nil {
		return err
	}
	fencer, err := executor.New(executor.Config{
		Client: cs.executor, Requests: fencing.FencingRequests(), Policies: fencing.FencePolicies(), Targets: fencing.FenceTargets(),
		Classes: fencing.FenceClasses(), Nodes: nf.Core().V1().Nodes(), Secrets: sf.Core().V1().Secrets(),
		CredentialsNamespace: opts.CredentialsNamespace, Recorder: recorder, Metrics: m.executor,
	})
	if err != nil {
		return err
	}
	for _, f := range []interface {
		Start(<-chan struct{})
		Shutdown()
	}{ff, sf, nf} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	logger.Info("Fence agent running", "probeInterval", opts.ProbeInterval, "credentialsNamespace", opts.CredentialsNamespace)
	var wg sync.WaitGroup
	wg.Go(func() { prober.Run(ctx, opts.Workers) })
	fencer.Run(ctx, opts.FenceWorkers)
	wg.Wait()
	return nil
}

// clients are the agent's API clients, each with its own user agent: the
// informers' (kube, fencing), the probe's, the executor's and the Events'.
type clients struct {
	kube, events             kubernetes.Interface
	fencing, probe, executor versioned.Interface
}

func newClients(base *rest.Config) (clients, error) {
	var cs clients
	var err error
	informerCfg := kubeclient.WithUserAgent(base, UserAgent("shared-informers"))
	if cs.kube, err = kubernetes.NewForConfig(informerCfg); err != nil {
		return cs, fmt.Errorf("creating Kubernetes client for the informers: %w", err)
	}
	if cs.events, err = kubernetes.NewForConfig(kubeclient.WithUserAgent(base, UserAgent("events"))); err != nil {
		return cs, fmt.Errorf("creating events client: %w", err)
	}
	for _, c := range []struct {
		client *versioned.Interface
		cfg    *rest.Config
	}{
		{&cs.fencing, informerCfg},
		{&cs.probe, kubeclient.WithUserAgent(base, UserAgent("probe"))},
		{&cs.executor, kubeclient.WithUserAgent(base, UserAgent("executor"))},
	} {
		if *c.client, err = versioned.NewForConfig(crdConfig(c.cfg)); err != nil {
			return cs, fmt.Errorf("creating fencing client %s: %w", c.cfg.UserAgent, err)
		}
	}
	return cs, nil
}

// crdConfig is cfg speaking JSON: custom resources have no protobuf
// encoding, and the shared configuration asks for protobuf first.
func crdConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	return c
}

// nodeIdentity keeps of a Node what the executor reads: its name, UID,
// labels and resource version. Nodes are large and change often; the agent
// never needs their spec or status.
func nodeIdentity(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, Labels: n.Labels, ResourceVersion: n.ResourceVersion, CreationTimestamp: n.CreationTimestamp,
	}}, nil
}
