package kubectlplugin

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

// runNodeFencing runs fenceline-controller's node-fencing controller in the
// test, on the real API server, so that the plugin's asks are carried out
// by the controller as in a cluster. While it runs, the kubelet Leases of
// the renew nodes are renewed every second, as their kubelets would: the
// scene's nodes must not turn into fencing candidates. stop ends both and
// waits for them.
func (s *scene) runNodeFencing(renew ...string) (stop func()) {
	ctx, cancel := context.WithCancel(klog.NewContext(s.ctx, klog.Background()))
	core := informers.NewSharedInformerFactory(s.kube, 0)
	leases := informers.NewSharedInformerFactoryWithOptions(s.kube, 0, informers.WithNamespace(v1.NamespaceNodeLease))
	fi := fencinginformers.NewSharedInformerFactory(s.fences, 0)
	events := &record.FakeRecorder{} // no channel: Events are dropped
	c, err := nodefencing.New(nodefencing.Config{
		Informers: core, NodeLeases: leases, Fencing: fi, Client: s.fences,
		Actuator: &actuator.Actuator{Client: s.kube, Recorder: events}, Recorder: events,
	})
	s.must(err, "creating node-fencing")
	core.Start(ctx.Done())
	leases.Start(ctx.Done())
	fi.Start(ctx.Done())
	for what, synced := range map[string]func() bool{
		"nodes":           core.Core().V1().Nodes().Informer().HasSynced,
		"leases":          leases.Coordination().V1().Leases().Informer().HasSynced,
		"fencingrequests": fi.Fencing().V1alpha1().FencingRequests().Informer().HasSynced,
	} {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			s.t.Fatalf("node-fencing's %s cache never synced", what)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx, 2) })
	wg.Go(func() { s.renewLeases(ctx, renew) })
	return func() {
		cancel()
		wg.Wait()
		core.Shutdown()
		leases.Shutdown()
		fi.Shutdown()
	}
}

// renewLeases renews the nodes' Leases every second until ctx ends.
func (s *scene) renewLeases(ctx context.Context, nodes []string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, n := range nodes {
			l, err := s.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				continue // ctx ended, or a transient error: the next tick retries
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			_, _ = s.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitRequestAnnotated waits until node's FencingRequest carries the
// annotation key.
func (s *scene) waitRequestAnnotated(node, key string) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := s.fences.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, r := range l.Items {
			if _, ok := r.Annotations[key]; ok && r.Spec.NodeName == node {
				return true, nil
			}
		}
		return false, nil
	})
	s.must(err, "waiting for "+key+" on the FencingRequest of "+node)
}

// waitRequestCondition waits until the request has the condition.
func (s *scene) waitRequestCondition(name, typ string) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := s.fences.FencingV1alpha1().FencingRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return meta.FindStatusCondition(r.Status.Conditions, typ) != nil, nil
	})
	s.must(err, "waiting for condition "+typ+" of FencingRequest "+name)
}
