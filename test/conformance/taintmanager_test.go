package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"fenceline.io/fenceline/test/world"
)

// TaintEvictionEnv selects which taint-eviction controllers
// TestNoExecuteTaintManager holds to upstream's specs: a comma-separated
// list of "kube-controller-manager" (its own taint-eviction-controller,
// which proves the harness) and "fenceline" (fenceline-controller's
// taint-eviction with --feature-gates=TaintEviction=true, and
// kube-controller-manager's turned off), or "all", the default.
const TaintEvictionEnv = "FENCELINE_TAINT_EVICTION"

// Implementations of NoExecute taint eviction.
const (
	KubeControllerManager = "kube-controller-manager"
	Fenceline             = "fenceline"
)

// taintManagerFocus selects upstream's [sig-node] NoExecuteTaintManager
// Single Pod and Multiple Pods specs (test/e2e/node/taints.go).
const taintManagerFocus = `NoExecuteTaintManager`

// taintManagerSpecs is how many specs the focus selects in v1.37.2: five
// Single Pod, two Multiple Pods.
const taintManagerSpecs = 7

// taintManagerTimeout bounds the upstream suite. Its specs wait out fixed
// windows of up to 80 s each (about 5 minutes in all when every spec
// passes); a failing spec can take longer.
const taintManagerTimeout = 20 * time.Minute

// TestNoExecuteTaintManager runs upstream's NoExecuteTaintManager e2e specs
// on the local control plane with KWOK nodes, once per implementation
// selected by FENCELINE_TAINT_EVICTION, each on its own cluster and both at
// once (the specs mostly wait), and fails on any spec that does not pass.
func TestNoExecuteTaintManager(t *testing.T) {
	impls, err := selectedImplementations(os.Getenv(TaintEvictionEnv))
	if err != nil {
		t.Fatal(err)
	}
	for _, impl := range []string{KubeControllerManager, Fenceline} {
		t.Run(impl, func(t *testing.T) {
			if !impls[impl] {
				t.Skipf("not selected: set %s=%s (or all) to run it", TaintEvictionEnv, impl)
			}
			if testing.Short() {
				t.Skip("skipping: needs a local control plane (not run with -short)")
			}
			t.Parallel()
			runTaintManagerSuite(t, impl)
		})
	}
}

// selectedImplementations parses FENCELINE_TAINT_EVICTION.
func selectedImplementations(v string) (map[string]bool, error) {
	if strings.TrimSpace(v) == "" {
		v = "all"
	}
	sel := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		switch f = strings.TrimSpace(f); f {
		case KubeControllerManager, Fenceline:
			sel[f] = true
		case "all":
			sel[KubeControllerManager], sel[Fenceline] = true, true
		default:
			return nil, fmt.Errorf("%s=%q: unknown implementation %q (want %s, %s or all)", TaintEvictionEnv, v, f, KubeControllerManager, Fenceline)
		}
	}
	return sel, nil
}

// taintEvictionDisabled is what kube-controller-manager logs for its
// taint-eviction-controller when --controllers turns it off.
var taintEvictionDisabled = []byte(`"Warning: controller is disabled" controller="taint-eviction-controller"`)

func runTaintManagerSuite(t *testing.T, impl string) {
	bin := e2eBinaryPath(t)
	// With TaintEviction, kube-controller-manager runs with
	// world.UpstreamTaintEvictionOff and fenceline-controller with
	// world.TaintEvictionGate.
	w := world.Start(t, world.Options{TaintEviction: impl == Fenceline})
	ctx, cancel := context.WithTimeout(context.Background(), taintManagerTimeout+5*time.Minute)
	defer cancel()

	if impl == Fenceline {
		// Make sure the specs test ours: kube-controller-manager says so
		// when it skips its own taint-eviction-controller.
		if err := waitLogContains(ctx, filepath.Join(w.Cluster.LogDir(), "kube-controller-manager.log"), taintEvictionDisabled, 30*time.Second); err != nil {
			t.Fatalf("kube-controller-manager's taint-eviction-controller is not off: %v", err)
		}
	}
	if err := startSystemDaemonSets(ctx, w); err != nil {
		t.Fatal(err)
	}

	if exited, err := w.Controller.Exited(); exited {
		t.Fatalf("fenceline-controller exited (%v); see %s", err, w.Controller.LogPath)
	}
	evictions, err := watchEvictionEvents(ctx, w.Cluster.Client())
	if err != nil {
		t.Fatal(err)
	}

	res, err := runUpstreamE2E(ctx, bin, "e2e-"+impl, w.Cluster.LogDir(), w.Cluster.Dir(),
		w.Cluster.AdminKubeconfig(), taintManagerFocus, taintManagerTimeout)
	if err != nil {
		t.Fatal(err)
	}
	checkSuite(t, res, taintManagerSpecs)
	checkEvictedBy(t, evictions, map[string]string{
		KubeControllerManager: upstreamTaintEvictionComponent,
		Fenceline:             fencelineComponent,
	}[impl])
	if exited, err := w.Controller.Exited(); exited {
		t.Errorf("fenceline-controller exited during the suite (%v); see %s", err, w.Controller.LogPath)
	}
}

// waitLogContains waits until the file at path contains want.
func waitLogContains(ctx context.Context, path string, want []byte, timeout time.Duration) error {
	return world.WaitFor(ctx, timeout, fmt.Sprintf("%q in %s", want, path), func(context.Context) (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		return bytes.Contains(b, want), nil
	})
}

// systemDaemonSets are the per-node system pods that the e2e framework's
// e2enode.WaitForTotalHealthy, called before every NoExecuteTaintManager
// spec, requires on each schedulable node (its requiredPerNodePods). The
// KWOK cluster has no node daemons, so without stand-ins each spec would
// first wait out that check's full minute (and ignore its error). They
// tolerate every taint, as the real DaemonSets do, so the specs' NoExecute
// taints leave them alone.
var systemDaemonSets = []string{"kube-proxy", "fluentd-elasticsearch", "node-problem-detector"}

// systemDaemonSetsTimeout bounds the start of their pods on every node.
const systemDaemonSetsTimeout = 60 * time.Second

// startSystemDaemonSets creates the stand-in system DaemonSets in
// kube-system and waits until each runs a pod on every node.
func startSystemDaemonSets(ctx context.Context, w *world.World) error {
	cs := w.Cluster.Client()
	for _, name := range systemDaemonSets {
		labels := map[string]string{"k8s-app": name}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name, Labels: labels},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Containers:  []corev1.Container{{Name: name, Image: "registry.k8s.io/pause:3.10"}},
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					},
				},
			},
		}
		if _, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating DaemonSet %s: %w", name, err)
		}
	}
	return world.WaitFor(ctx, systemDaemonSetsTimeout, "the system DaemonSets' pods Running on every node", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient; keep polling until the deadline
		}
		running := map[string]bool{} // DaemonSet/node
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running[p.Labels["k8s-app"]+"/"+p.Spec.NodeName] = true
			}
		}
		for _, name := range systemDaemonSets {
			for _, n := range w.Nodes {
				if !running[name+"/"+n] {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// Who records the eviction Events: upstream's taint-eviction-controller
// records TaintManagerEviction ("Marking for deletion Pod ns/name",
// "Cancelling deletion of Pod ns/name") and so does Fenceline's
// taint-eviction, as fenceline-controller.
const (
	taintManagerEvictionReason     = "TaintManagerEviction"
	upstreamTaintEvictionComponent = "taint-eviction-controller"
	fencelineComponent             = "fenceline-controller"
)

// evictionEvents collects the TaintManagerEviction Events seen while the
// suite runs (the specs' namespaces, and their Events, are deleted after
// each spec, so they are watched, not listed afterwards).
type evictionEvents struct {
	mu          sync.Mutex
	byComponent map[string][]string // component -> "ns/pod: message", once per Event
	seen        map[types.UID]bool
}

// watchEvictionEvents starts watching Events with reason
// TaintManagerEviction in every namespace until ctx ends, and returns once
// the watch is established.
func watchEvictionEvents(ctx context.Context, cs kubernetes.Interface) (*evictionEvents, error) {
	e := &evictionEvents{byComponent: map[string][]string{}, seen: map[types.UID]bool{}}
	sel := fields.OneTermEqualSelector("reason", taintManagerEvictionReason).String()
	events := cs.CoreV1().Events(metav1.NamespaceAll)
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return events.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return events.Watch(ctx, o)
		},
	}, &corev1.Event{}, 0, cache.Indexers{})
	record := func(obj any) {
		if ev, ok := obj.(*corev1.Event); ok {
			e.add(ev)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching %s Events: %w", taintManagerEvictionReason, ctx.Err())
	}
	return e, nil
}

func (e *evictionEvents) add(ev *corev1.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen[ev.UID] {
		return
	}
	e.seen[ev.UID] = true
	component := ev.Source.Component
	if component == "" {
		component = ev.ReportingController
	}
	e.byComponent[component] = append(e.byComponent[component],
		ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name+": "+ev.Message)
}

// checkEvictedBy fails the test unless the suite's evictions were recorded
// by want and by no one else: proof that the specs held the selected
// implementation to account, not another eviction path.
func checkEvictedBy(t *testing.T, e *evictionEvents, want string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for component, evs := range e.byComponent {
		t.Logf("%s Events from %q: %d", taintManagerEvictionReason, component, len(evs))
		if component != want {
			t.Errorf("%s recorded %s Events, want only %s's: %q", component, taintManagerEvictionReason, want, evs)
		}
	}
	if len(e.byComponent[want]) == 0 {
		t.Errorf("no %s Event from %s: did it evict anything?", taintManagerEvictionReason, want)
	}
}
