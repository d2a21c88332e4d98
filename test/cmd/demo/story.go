package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

const demoNamespace = "demo"

// worldConfig says what startWorld runs.
type worldConfig struct {
	// name is the log directory under <repo>/.cache/demo.
	name string
	// fencing installs the fencing API, starts fenceline-fence-agent and
	// gives every node a simulated Redfish BMC, its FenceTarget, the
	// FenceClass and a FencePolicy (world.SetUpFencing).
	fencing bool
	// zombie keeps a powered-off node's writers writing (the manual story's
	// "powered off" node is really a partitioned one).
	zombie bool
	// timeline receives the BMCs' power events; nil records none.
	timeline *world.Timeline
	// storage is the mock driver's backend.
	storage storage
	// realKubelet runs node-c as a real-kubelet node (package realkubelet)
	// and places db-0 on it, so that the story's node is a real kubelet.
	realKubelet bool
	// metrics serves every component's metrics on a loopback port of its
	// own (world.Options.Metrics).
	metrics bool
}

// realNode is the real-kubelet node of a world with worldConfig.realKubelet.
const realNode = "node-c"

// demoWorld is a running world and what stops it.
type demoWorld struct {
	*world.World
	// Fencing holds the BMCs and the policy; nil without worldConfig.fencing.
	Fencing  *world.FencingSetup
	teardown func()
}

// startWorld starts the control plane and the product, logging into
// <repo>/.cache/demo/<name>/logs. The caller must call teardown.
func startWorld(ctx context.Context, st stepper, cfg worldConfig) (*demoWorld, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(root, ".cache", "demo", cfg.name, "logs")
	if err := os.RemoveAll(logDir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", logDir, err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", logDir, err)
	}
	st.printf("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (logs: %s)", logDir)
	c, err := cluster.Launch(ctx, cluster.Options{ControllerManager: true, Scheduler: true, KWOK: true, LogDir: logDir})
	dw := &demoWorld{}
	dw.teardown = func() {
		if dw.Fencing != nil {
			dw.Fencing.Close()
		}
		if dw.World != nil {
			dw.World.Stop()
		}
		if c != nil {
			c.Stop()
			_ = os.RemoveAll(c.Dir())
		}
	}
	if err != nil {
		dw.teardown()
		return nil, err
	}
	components := "fenceline-attacher and fenceline-controller"
	if cfg.fencing {
		components = "fenceline-attacher, fenceline-controller and fenceline-fence-agent"
	}
	backend := "the mock driver"
	if cfg.storage.real() {
		backend = fmt.Sprintf("the mock driver on a real iSCSI target (tgt, fence method %s; the stand-ins write through their own iSCSI sessions)", cfg.storage.method)
	}
	st.printf("control plane ready at %s; starting %s, 3 nodes with kubelet stand-ins, %s", c.ServerURL(), backend, components)
	opts := world.Options{ZombieWrites: cfg.zombie, WriteInterval: 250 * time.Millisecond, Fencing: cfg.fencing,
		Driver: cfg.storage.driver(), Metrics: cfg.metrics}
	if cfg.realKubelet {
		st.printf("%s is a real kubelet on a fake container runtime; node-a and node-b are KWOK nodes with kubelet stand-ins", realNode)
		opts.Nodes, opts.RealKubelets = []string{"node-a", "node-b"}, []string{realNode}
	}
	dw.World, err = world.Launch(ctx, c, opts)
	if err == nil {
		err = dw.CreateStorageClass(ctx)
	}
	if err == nil && cfg.fencing {
		st.printf("giving every node a simulated Redfish BMC, its FenceTarget, a FenceClass and a FencePolicy")
		dw.Fencing, err = dw.SetUpFencing(ctx, world.BMCRedfish, cfg.timeline, nil)
	}
	if err != nil {
		dw.teardown()
		return nil, err
	}
	return dw, nil
}

// runStory starts a world for story and tears it down after.
func runStory(ctx context.Context, cfg worldConfig, story func(context.Context, stepper, *demoWorld) error) error {
	st := stepper{start: time.Now()}
	dw, err := startWorld(ctx, st, cfg)
	if err != nil {
		return err
	}
	defer func() {
		st.printf("tearing down")
		dw.teardown()
	}()
	return story(ctx, st, dw)
}

// runDemo tells the automatic story (autoStory).
func runDemo(ctx context.Context, store storage, onReal bool, replicas int, verbose bool) error {
	tl := &world.Timeline{}
	cfg := worldConfig{name: "demo", fencing: true, timeline: tl, storage: store, realKubelet: onReal}
	return runStory(ctx, cfg, func(ctx context.Context, st stepper, dw *demoWorld) error {
		return autoStory(ctx, st, dw, tl, replicas, verbose, store, pinned(onReal))
	})
}

// pinned is the node db-0 must run on: the real-kubelet node, if any.
func pinned(onReal bool) string {
	if onReal {
		return realNode
	}
	return ""
}

// runManualDemo tells the manual story (manualStory).
func runManualDemo(ctx context.Context, store storage, onReal bool, replicas int, verbose bool) error {
	cfg := worldConfig{name: "demo-manual", zombie: true, storage: store, realKubelet: onReal}
	return runStory(ctx, cfg, func(ctx context.Context, st stepper, dw *demoWorld) error {
		return manualStory(ctx, st, dw.World, replicas, verbose, store, pinned(onReal))
	})
}

// deployDB creates StatefulSet db with replicas pods, one RWO volume each,
// waits until they run and db-0 writes, and returns db-0 and the handle of
// its volume. The timeline watches the demo namespace until stop closes.
// With pin, db-0 runs there: the other nodes are cordoned until it does.
func deployDB(ctx context.Context, st stepper, w *world.World, tl *world.Timeline, replicas int, pin string, stop <-chan struct{}) (*corev1.Pod, string, error) {
	cs := w.Cluster.Client()
	if err := w.CreateNamespace(ctx, demoNamespace); err != nil {
		return nil, "", err
	}
	handles, err := w.ProvisionStatefulSet(ctx, demoNamespace, "db", replicas)
	if err != nil {
		return nil, "", err
	}
	tl.Watch(cs, demoNamespace, stop)
	st.printf("creating StatefulSet db with %d replicas, one RWO volume each", replicas)
	uncordon := func(context.Context) error { return nil }
	if pin != "" {
		if uncordon, err = w.OnlyOn(ctx, pin); err != nil {
			return nil, "", err
		}
	}
	if _, err := cs.AppsV1().StatefulSets(demoNamespace).Create(ctx, world.StatefulSet(demoNamespace, "db", int32(replicas)), metav1.CreateOptions{}); err != nil {
		return nil, "", fmt.Errorf("creating StatefulSet: %w", err)
	}
	var victim *corev1.Pod
	for i := range replicas {
		p, err := w.WaitRunning(ctx, demoNamespace, fmt.Sprintf("db-%d", i), "", 90*time.Second)
		if err != nil {
			return nil, "", err
		}
		st.printf("pod %s Running on %s", p.Name, p.Spec.NodeName)
		if i == 0 {
			victim = p
			if err := uncordon(ctx); err != nil {
				return nil, "", err
			}
		}
	}
	node := victim.Spec.NodeName
	if err := world.WaitFor(ctx, 30*time.Second, "db-0 writing", func(context.Context) (bool, error) {
		return len(w.NodeWrites(node)) > 0, nil
	}); err != nil {
		return nil, "", err
	}
	return victim, handles[0], nil
}
