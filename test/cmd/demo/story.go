package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

const demoNamespace = "demo"

// startWorld starts the control plane and the product, logging into
// <repo>/.cache/demo/<name>/logs.
func startWorld(ctx context.Context, st stepper, name string) (*world.World, func(), error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	logDir := filepath.Join(root, ".cache", "demo", name, "logs")
	if err := os.RemoveAll(logDir); err != nil {
		return nil, nil, fmt.Errorf("clearing %s: %w", logDir, err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("creating %s: %w", logDir, err)
	}
	st.printf("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK (logs: %s)", logDir)
	c, err := cluster.Launch(ctx, cluster.Options{ControllerManager: true, Scheduler: true, KWOK: true, LogDir: logDir})
	stopCluster := func() {
		if c != nil {
			c.Stop()
			_ = os.RemoveAll(c.Dir())
		}
	}
	if err != nil {
		stopCluster()
		return nil, nil, err
	}
	st.printf("control plane ready at %s; starting mock driver, 3 nodes with kubelet stand-ins, fenceline-attacher and fenceline-controller", c.ServerURL())
	w, err := world.Launch(ctx, c, world.Options{ZombieWrites: true, WriteInterval: 250 * time.Millisecond})
	teardown := func() {
		if w != nil {
			w.Stop()
		}
		stopCluster()
	}
	if err != nil {
		teardown()
		return nil, nil, err
	}
	if err := w.CreateStorageClass(ctx); err != nil {
		teardown()
		return nil, nil, err
	}
	return w, teardown, nil
}

func runDemo(ctx context.Context, replicas int, verbose bool) error {
	st := stepper{start: time.Now()}
	w, teardown, err := startWorld(ctx, st, "demo")
	if err != nil {
		return err
	}
	defer func() {
		st.printf("tearing down")
		teardown()
	}()
	return story(ctx, st, w, replicas, verbose)
}

// story is scenario 1 (KEP-2268 non-graceful shutdown with Fenceline),
// narrated.
func story(ctx context.Context, st stepper, w *world.World, replicas int, verbose bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cs := w.Cluster.Client()
	if err := w.CreateNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	handles, err := w.ProvisionStatefulSet(ctx, demoNamespace, "db", replicas)
	if err != nil {
		return err
	}
	tl := &world.Timeline{}
	stop := make(chan struct{})
	defer close(stop)
	tl.Watch(cs, demoNamespace, stop)

	st.printf("creating StatefulSet db with %d replicas, one RWO volume each", replicas)
	if _, err := cs.AppsV1().StatefulSets(demoNamespace).Create(ctx, world.StatefulSet(demoNamespace, "db", int32(replicas)), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StatefulSet: %w", err)
	}
	var victim *corev1.Pod
	for i := range replicas {
		p, err := w.WaitRunning(ctx, demoNamespace, fmt.Sprintf("db-%d", i), "", 90*time.Second)
		if err != nil {
			return err
		}
		st.printf("pod %s Running on %s", p.Name, p.Spec.NodeName)
		if i == 0 {
			victim = p
		}
	}
	nodeA, handle := victim.Spec.NodeName, handles[0]
	if err := world.WaitFor(ctx, 30*time.Second, "db-0 writing", func(context.Context) (bool, error) {
		return len(w.Kubelets[nodeA].Writes()) > 0, nil
	}); err != nil {
		return err
	}

	t0 := time.Now()
	tl.Add(t0, "node %s powered off (its pod keeps writing to storage: a zombie)", nodeA)
	st.printf("powering off %s (the stand-in keeps writing, as a partitioned node would)", nodeA)
	if err := w.PowerOff(ctx, nodeA); err != nil {
		return err
	}
	if err := w.Cluster.WaitNodeReady(ctx, nodeA, corev1.ConditionUnknown, 30*time.Second); err != nil {
		return err
	}
	st.printf("%s is NotReady; an operator confirms it is off and applies the out-of-service taint", nodeA)
	taintAt := time.Now()
	if err := w.AddTaint(ctx, nodeA, world.OutOfServiceTaint); err != nil {
		return err
	}
	tl.Add(taintAt, "operator: out-of-service taint on %s", nodeA)
	moved, err := w.WaitRunning(ctx, demoNamespace, "db-0", nodeA, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("the story did not complete: %w", err)
	}
	runningAt := time.Now()
	st.printf("db-0 Running again on %s", moved.Spec.NodeName)

	var recs []audit.Record
	if err := world.WaitFor(ctx, 20*time.Second, "refused writes from "+nodeA, func(context.Context) (bool, error) {
		recs, err = w.Audit()
		if err != nil {
			return false, nil //nolint:nilerr // retry reading
		}
		fence := audit.FirstIndex(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(handle), audit.Node(nodeA), audit.Fenced(), audit.OK())
		return fence >= 0 && audit.Count(recs[fence+1:], audit.Method("Write"), audit.Node(nodeA), audit.Code("PermissionDenied")) >= 3, nil
	}); err != nil {
		return err
	}
	fence := audit.FirstIndex(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(handle), audit.Node(nodeA), audit.Fenced(), audit.OK())
	publish := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(handle), audit.Node(moved.Spec.NodeName), audit.OK())
	after := recs[fence+1:]
	accepted := audit.Count(after, audit.Method("Write"), audit.Node(nodeA), audit.OK())
	rejected := audit.Count(after, audit.Method("Write"), audit.Node(nodeA), audit.Code("PermissionDenied"))

	st.printf("powering %s back on (new boot ID); its stand-in cleans up as a kubelet does, which lifts the fence", nodeA)
	if err := w.PowerOn(ctx, nodeA); err != nil {
		return err
	}
	if err := world.WaitFor(ctx, 60*time.Second, "clean-up on "+nodeA, func(context.Context) (bool, error) {
		r, err := w.Audit()
		return err == nil && audit.Count(r, audit.Method("NodeUnstageVolume"), audit.Node(nodeA), audit.Volume(handle), audit.OK()) > 0, nil
	}); err != nil {
		return err
	}
	if err := w.RemoveTaint(ctx, nodeA, world.OutOfServiceTaint.Key); err != nil {
		return err
	}
	tl.Add(time.Now(), "operator: out-of-service taint removed from %s", nodeA)
	if recs, err = w.Audit(); err == nil {
		tl.AddAudit(recs)
	}

	fmt.Printf("\nTimeline (seconds from the power-off of %s):\n%s\n", nodeA, tl.Format(t0))
	check := invariant.Check(recs, invariant.Failover{Volume: handle, From: nodeA, CutOff: t0})
	if err := check.Err(); err != nil {
		fmt.Println(err)
	}
	ok := fence >= 0 && publish > fence && accepted == 0 && check.Err() == nil && check.NewNode == moved.Spec.NodeName
	verdict := fmt.Sprintf("failover %.1f s after the taint (%.1f s after the power-off); node %s's writes after the fence: %d accepted, %d rejected",
		runningAt.Sub(taintAt).Seconds(), runningAt.Sub(t0).Seconds(), nodeA, accepted, rejected)
	if !ok {
		fmt.Printf("FAILED: %s (fenced unpublish at record %d, publish to %s at record %d)\n", verdict, fence, moved.Spec.NodeName, publish)
		return fmt.Errorf("the fence did not hold")
	}
	fmt.Printf("OK: %s\n", verdict)
	if verbose {
		fmt.Printf("component logs: %s\n", w.Cluster.LogDir())
	}
	return nil
}
