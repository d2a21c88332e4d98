package app_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

const (
	ns          = "default"
	waitTimeout = 30 * time.Second
)

// env is a real kube-apiserver with fenceline-controller running in-process
// under the identity and RBAC of deploy/controller/rbac.yaml.
type env struct {
	t        testing.TB
	ctx      context.Context
	cluster  *cluster.Cluster
	admin    kubernetes.Interface
	registry *prometheus.Registry
	saConfig *rest.Config
}

// testOptions are the defaults with one worker per controller, so that the
// queue is FIFO and barrier() can tell that earlier events were handled.
func testOptions(controllers ...string) app.Options {
	o := app.DefaultOptions()
	o.Controllers = controllers
	o.Workers = 1
	return o
}

// startEnv starts etcd + kube-apiserver (no kube-controller-manager: the
// tests play node controller and kubelet through the API) and runs the
// controller with opts until the test ends.
func startEnv(t testing.TB, opts app.Options) *env {
	t.Helper()
	e := newEnv(t)
	e.runController(opts)
	return e
}

// newEnv starts the control plane and creates the controller's
// ServiceAccount and RBAC from deploy/controller/rbac.yaml.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, cluster.Options{})
}

// newEnvWith is newEnv with control-plane options (e.g. a
// kube-controller-manager).
func newEnvWith(t testing.TB, copts cluster.Options) *env {
	t.Helper()
	c := cluster.Start(t, copts)
	e := &env{t: t, ctx: t.Context(), cluster: c, admin: c.Client(), registry: prometheus.NewRegistry()}
	if err := world.ApplyRBAC(e.ctx, e.admin, filepath.Join("..", "..", "..", "deploy", "controller", "rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	e.saConfig, _ = c.ServiceAccountConfig(t, world.Namespace, world.ControllerServiceAccount)
	return e
}

// runController runs app.Run as the controller's ServiceAccount until the
// test ends or stop is called, and checks that it stops cleanly.
func (e *env) runController(opts app.Options) (stop func()) {
	e.t.Helper()
	logger := ktesting.NewLogger(e.t, ktesting.NewConfig(ktesting.Verbosity(4)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	if opts.Registry == nil {
		opts.Registry = e.registry
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, e.saConfig, opts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("controller stopped with error: %v", err)
				}
			case <-time.After(30 * time.Second):
				e.t.Error("controller did not stop within 30s")
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it returns true or the deadline passes.
func (e *env) waitFor(what string, cond func(ctx context.Context) (bool, error)) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// createNode creates a node and sets its status (Ready since now or not).
func (e *env) createNode(name string, ready bool, opts ...testobj.NodeOption) *v1.Node {
	e.t.Helper()
	status := testobj.NotReadySince(time.Now())
	if ready {
		status = testobj.ReadySince(time.Now())
	}
	want := testobj.Node(name, append([]testobj.NodeOption{status}, opts...)...)
	want.UID = ""
	n, err := e.admin.CoreV1().Nodes().Create(e.ctx, want, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating node %s: %v", name, err)
	}
	// The controllers may already be annotating the new node: retry.
	e.updateNode(name, true, func(cur *v1.Node) { cur.Status = want.Status })
	return n
}

// updateNode applies mutate to the node (status too when status is true).
func (e *env) updateNode(name string, status bool, mutate func(*v1.Node)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.admin.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(n)
		if status {
			_, err = e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
		} else {
			_, err = e.admin.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		e.t.Fatalf("updating node %s: %v", name, err)
	}
}

// setReady sets the node's Ready condition as the node controller or a
// returning kubelet would, with lastTransitionTime now.
func (e *env) setReady(name string, ready bool) {
	e.t.Helper()
	opt := testobj.NotReadySince(time.Now())
	if ready {
		opt = testobj.ReadySince(time.Now())
	}
	e.updateNode(name, true, func(n *v1.Node) { opt(n) })
}

func (e *env) addTaint(name, key string, effect v1.TaintEffect) {
	e.t.Helper()
	e.updateNode(name, false, func(n *v1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Value: "test", Effect: effect})
	})
}

func (e *env) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.admin.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting node %s: %v", name, err)
	}
	return n
}

// waitTaint waits until the node has (or has not) a taint with the key.
func (e *env) waitTaint(name, key string, want bool) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("taint %s on node %s = %v", key, name, want), func(ctx context.Context) (bool, error) {
		n, err := e.admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return nodeutil.HasTaint(n, key) == want, nil
	})
}

// createPod creates a pod bound to a node (no kubelet runs: it stays Pending).
func (e *env) createPod(name, node string, opts ...testobj.PodOption) *v1.Pod {
	e.t.Helper()
	want := testobj.Pod(ns, name, append([]testobj.PodOption{testobj.OnNode(node)}, opts...)...)
	want.UID, want.Status = "", v1.PodStatus{}
	p, err := e.admin.CoreV1().Pods(ns).Create(e.ctx, want, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return p
}

// createStuckPod creates a pod on the node and deletes it gracefully: with no
// kubelet to confirm, it stays Terminating, as on a dead node.
func (e *env) createStuckPod(name, node string, opts ...testobj.PodOption) *v1.Pod {
	e.t.Helper()
	p := e.createPod(name, node, opts...)
	e.terminate(p)
	return p
}

func (e *env) terminate(p *v1.Pod) {
	e.t.Helper()
	grace := int64(300)
	if err := e.admin.CoreV1().Pods(p.Namespace).Delete(e.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		e.t.Fatalf("deleting pod %s: %v", p.Name, err)
	}
}

// podExists reports whether the pod with that UID still exists.
func (e *env) podExists(p *v1.Pod) bool {
	e.t.Helper()
	cur, err := e.admin.CoreV1().Pods(p.Namespace).Get(e.ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.t.Fatalf("getting pod %s: %v", p.Name, err)
	}
	return cur.UID == p.UID
}

func (e *env) waitPodGone(p *v1.Pod) {
	e.t.Helper()
	e.waitFor("pod "+p.Name+" to be deleted", func(ctx context.Context) (bool, error) {
		return !e.podExists(p), nil
	})
}

// removeFinalizers lets a pod held by test finalizers go.
func (e *env) removeFinalizers(p *v1.Pod) {
	e.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.admin.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("removing finalizers of %s: %v", p.Name, err)
	}
}

// events returns the Events about an object with the reason.
func (e *env) events(kind, namespace, name string, uid types.UID, reason string) []v1.Event {
	e.t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}
	if uid != "" {
		sel["involvedObject.uid"] = string(uid)
	}
	list, err := e.admin.CoreV1().Events(namespace).List(e.ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		e.t.Fatalf("listing events: %v", err)
	}
	return list.Items
}

// waitEvent waits for an Event with the reason on the object.
func (e *env) waitEvent(kind, namespace, name string, uid types.UID, reason string) v1.Event {
	e.t.Helper()
	var got v1.Event
	e.waitFor(fmt.Sprintf("event %s on %s %s", reason, kind, name), func(context.Context) (bool, error) {
		evs := e.events(kind, namespace, name, uid, reason)
		if len(evs) == 0 {
			return false, nil
		}
		got = evs[0]
		return true, nil
	})
	return got
}
