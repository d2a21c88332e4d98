package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// upstreamWatchEnv enables BenchmarkFailoverNoHumanUpstream: how long to
// watch upstream after the power loss, e.g. 8m. One run takes that long,
// so `make bench` leaves it off.
const upstreamWatchEnv = "FENCELINE_BENCH_UPSTREAM_WATCH"

// upstreamWatch is what one watch of upstream with no human saw, each time
// from T0, the power loss; -1 when it did not happen within the watch.
type upstreamWatch struct {
	Victim string        `json:"victim"`
	Moved  int           `json:"pods_on_lost_node"`
	Watch  time.Duration `json:"watch_ns"`
	// NotReady is when kube-controller-manager marked the node not Ready,
	// Terminating when the last of its pods was marked for deletion
	// (taint eviction, after the 300 s toleration).
	NotReady    time.Duration `json:"node_not_ready_ns"`
	Terminating time.Duration `json:"pods_terminating_ns"`
	// PodsDeleted, VAsGone and Replacements are the failover's stages as
	// BenchmarkFailover measures them.
	PodsDeleted  time.Duration `json:"pods_deleted_ns"`
	VAsGone      time.Duration `json:"vas_gone_ns"`
	Replacements time.Duration `json:"replacements_attached_ns"`
	// At the end of the watch: pods of the lost node still there, its
	// VolumeAttachments still there, replacements Running elsewhere.
	PodsLeft, VAsLeft, ReplacementsRunning int
}

// BenchmarkFailoverNoHumanUpstream watches the best upstream can do with no
// human at the same production timings as BenchmarkFailoverNoHuman: the
// same StatefulSet, upstream external-attacher, kube-controller-manager's
// pod GC and attach/detach controller, a driver that cannot fence, and a
// node that really lost power (no zombie). It is one run, not a median:
// enable it with FENCELINE_BENCH_UPSTREAM_WATCH=8m.
func BenchmarkFailoverNoHumanUpstream(b *testing.B) {
	s := benchSetup(b)
	watch, err := durationSetting(0, upstreamWatchEnv, 0)
	if err != nil {
		b.Fatal(err)
	}
	if watch == 0 {
		b.Skipf("set %s (e.g. 8m) to watch upstream fail over with no human; one run takes that long", upstreamWatchEnv)
	}
	upstream, err := cluster.Tool(upstreamAttacher)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), watch+repetitionDeadline)
		res, err := watchUpstreamNoHuman(ctx, s, upstream, watch)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("\nUpstream with no human at production-default timings, %d pods over 3 nodes, one run watched for %s:\n", s.Pods, watch)
		fmt.Printf("  node NotReady %s, pods Terminating %s, pods deleted %s, old VAs gone %s, replacements attached %s after the power loss\n",
			fmtSince(res.NotReady), fmtSince(res.Terminating), fmtSince(res.PodsDeleted), fmtSince(res.VAsGone), fmtSince(res.Replacements))
		fmt.Printf("  at the end: %d of %d pods still on %s, %d of its VolumeAttachments left, %d replacements Running\n\n",
			res.PodsLeft, res.Moved, res.Victim, res.VAsLeft, res.ReplacementsRunning)
		path, err := writeResult(fmt.Sprintf("failover-nohuman-upstream-%dpods", s.Pods), map[string]any{"machine": thisMachine(), "timings": productionTimings(upstreamOnly(s)), "watch": res})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
	}
}

func fmtSince(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// watchUpstreamNoHuman runs the watch on a fresh cluster.
func watchUpstreamNoHuman(ctx context.Context, s settings, upstream string, watch time.Duration) (upstreamWatch, error) {
	res := upstreamWatch{Watch: watch}
	copts := cluster.Options{
		ControllerManager: true, Scheduler: true, KWOK: true,
		NodeLeaseSeconds:           prodLeaseSeconds,
		ExtraControllerManagerArgs: prodControllerManagerArgs,
	}
	err := withCluster(ctx, "bench-failover-nohuman-upstream", copts, func(c *cluster.Cluster) error {
		w, err := world.Launch(ctx, c, world.Options{
			AttacherPath:  upstream,
			AttacherArgs:  attacherRateArgs(s),
			NoController:  true,
			Driver:        world.DriverOptions{NoFence: true, NoForceUnpublish: true},
			WriteInterval: benchWriteInterval,
		})
		if w != nil {
			defer w.Stop()
		}
		if err != nil {
			return fmt.Errorf("starting upstream: %w", err)
		}
		return upstreamNoHuman(ctx, w, s.Pods, &res)
	})
	return res, err
}

// upstreamNoHuman powers the busiest node off and watches for watch.
func upstreamNoHuman(ctx context.Context, w *world.World, pods int, res *upstreamWatch) error {
	rec, v, err := deployForNoHuman(ctx, w, pods, "")
	if err != nil {
		return err
	}
	res.Victim, res.Moved = v.Node, len(v.Pods)
	select {
	case <-time.After(rand.N(prodRenewInterval)):
	case <-ctx.Done():
		return ctx.Err()
	}
	t0 := time.Now()
	if err := w.PowerOff(ctx, v.Node); err != nil {
		return err
	}
	var notReady, terminating time.Time
	var p progress
	deadline := time.NewTimer(res.Watch)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for !p.done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return finishWatch(ctx, w, rec, v, t0, notReady, terminating, p, res)
		case <-tick.C:
		}
		if n, err := w.Cluster.Client().CoreV1().Nodes().Get(ctx, v.Node, metav1.GetOptions{}); err == nil && notReady.IsZero() && !nodeutil.IsReady(n) {
			notReady = time.Now()
		}
		if terminating.IsZero() && allTerminating(rec, v) {
			terminating = time.Now()
		}
		p = rec.progress(v)
	}
	return finishWatch(ctx, w, rec, v, t0, notReady, terminating, p, res)
}

// finishWatch fills res from what was seen and what is left.
func finishWatch(ctx context.Context, w *world.World, rec *recorder, v victimState, t0, notReady, terminating time.Time, p progress, res *upstreamWatch) error {
	res.NotReady, res.Terminating = since(t0, notReady), since(t0, terminating)
	res.PodsDeleted, res.VAsGone, res.Replacements = since(t0, p.PodsDeleted), since(t0, p.VAsGone), since(t0, p.Replacements)
	pods, err := w.Cluster.Client().CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == v.Node {
			res.PodsLeft++
		} else if _, moved := v.Pods[pod.Name]; moved && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
			res.ReplacementsRunning++
		}
	}
	res.VAsLeft = len(rec.attachmentsOn(v.Node))
	return nil
}

// upstreamOnly is s for the upstream watch, which runs kube-controller-
// manager's own taint eviction.
func upstreamOnly(s settings) settings {
	s.UpstreamTaintEviction = true
	return s
}
