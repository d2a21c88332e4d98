package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/realkubelet"
	"fenceline.io/fenceline/test/world"
)

// Production defaults of the no-human benchmark: what a kubelet and
// kube-controller-manager v1.37 run with when nothing is tuned.
const (
	// prodLeaseSeconds is the kubelet's --node-lease-duration-seconds; it
	// renews the Lease every quarter of that, 10 s.
	prodLeaseSeconds = 40
	// prodRenewInterval is that renewal period.
	prodRenewInterval = prodLeaseSeconds * time.Second / 4
	// prodTolerationSeconds is what the DefaultTolerationSeconds admission
	// plugin gives every pod for the not-ready and unreachable taints.
	prodTolerationSeconds = 300
	// noHumanTimeout bounds a broken run's failover only.
	noHumanTimeout = 4 * time.Minute
)

// prodControllerManagerArgs put kube-controller-manager back on its
// defaults where the harness shortens them (node-monitor-period 5 s,
// node-monitor-grace-period 50 s, node-startup-grace-period 1 m).
var prodControllerManagerArgs = []string{
	"--node-monitor-period=5s",
	"--node-monitor-grace-period=50s",
	"--node-startup-grace-period=1m",
}

// noHumanRun is one repetition's figures, each from T0, the moment the
// node stopped heartbeating (negative: before it).
type noHumanRun struct {
	Rep    int    `json:"rep"`
	Victim string `json:"victim"`
	Moved  int    `json:"moved_pods"`
	T0     string `json:"t0"`
	// StopPoint is how long after an observed Lease renewal the heartbeats
	// stopped: the repetition's point of the renewal cycle (stopPoint).
	StopPoint time.Duration `json:"stop_point_ns"`
	// LastRenewal is the node's last Lease renewal (or status heartbeat)
	// before T0.
	LastRenewal time.Duration `json:"last_renewal_ns"`
	// Created, Admitted and Fenced are when the FencingRequest was first
	// seen, in phase Fencing and in phase Fenced (power read back Off).
	Created  time.Duration `json:"request_created_ns"`
	Admitted time.Duration `json:"request_admitted_ns"`
	Fenced   time.Duration `json:"fenced_ns"`
	// NotReady is when kube-controller-manager marked the node not Ready.
	NotReady     time.Duration `json:"node_not_ready_ns"`
	PodsDeleted  time.Duration `json:"pods_deleted_ns"`
	Unpublished  time.Duration `json:"fenced_unpublished_ns"`
	Running      time.Duration `json:"replacements_running_ns"`
	Replacements time.Duration `json:"replacements_attached_ns"`
	// Reason is the FencingRequest's spec.reason (LeaseExpired, or the
	// condition rule that fired), and LeaderChanges how often
	// fenceline-controller's leadership changed hands during the run: a
	// new leader observes every Lease afresh, so detection starts over.
	// Both explain a slow detection.
	Reason        string `json:"request_reason"`
	LeaderChanges int32  `json:"controller_leader_changes"`
}

// Metric names of the no-human table, in order.
const (
	nhCreated      = "heartbeat loss -> FencingRequest created"
	nhAdmitted     = "heartbeat loss -> request admitted (Fencing)"
	nhFenced       = "heartbeat loss -> Fenced (BMC read back Off)"
	nhNotReady     = "heartbeat loss -> node NotReady (kube-controller-manager)"
	nhPodsDeleted  = "heartbeat loss -> last stuck pod deleted"
	nhUnpublished  = "heartbeat loss -> last old volume unpublished (fence=true)"
	nhReplacements = "heartbeat loss -> last replacement Running + attached"
	nhFromFenced   = "Fenced -> last replacement Running + attached"
	nhFromRenewal  = "last Lease renewal -> last replacement Running + attached"
)

// BenchmarkFailoverNoHuman measures the failover with no human at
// production-default timings: a kubelet Lease of 40 s renewed every 10 s,
// kube-controller-manager's default node monitoring, pods with the default
// 300 s tolerations, and Fenceline's shipped FencePolicy and FenceClass
// defaults (nothing set but the class's method and the simulated BMCs'
// self-signed certificate). The node holding the most pods of a
// StatefulSet stops heartbeating while it keeps running (a hang or a
// partition: the case that needs a fence); node-fencing detects the stale
// Lease, the fence agent powers the node off through its Redfish BMC and
// reads Off back, the node is put out of service, and the benchmark
// measures until every replacement is Running with its volume attached,
// each old volume detached with fence=true first.
func BenchmarkFailoverNoHuman(b *testing.B) { benchNoHuman(b, noHumanCase{loss: lossHang}) }

// BenchmarkFailoverNoHumanPowerLoss is BenchmarkFailoverNoHuman with the
// node losing its power instead of hanging: its BMC reads Off from the
// cut. At its first missed Lease renewal node-fencing has the fence agent
// read the BMC (FencePolicy detection.powerCheck, on by default), and a
// node read Off is fenced without waiting for its Lease to go stale.
func BenchmarkFailoverNoHumanPowerLoss(b *testing.B) { benchNoHuman(b, noHumanCase{loss: lossPower}) }

// BenchmarkFailoverNoHumanSlowAPI is BenchmarkFailoverNoHuman with a slow
// API server as Fenceline's components see it: from just before the node
// hangs, every byte between kube-apiserver and fenceline-controller, the
// fence agent and fenceline-attacher is held for half of
// FENCELINE_BENCH_API_LATENCY each way (a proxy in front of the API
// server), so each request's answer comes that much late and watch events
// half of it.
func BenchmarkFailoverNoHumanSlowAPI(b *testing.B) {
	benchNoHuman(b, noHumanCase{loss: lossHang, slowAPI: true})
}

// BenchmarkFailoverNoHumanRealKubelet is BenchmarkFailoverNoHuman with the
// lost node run by a real kubelet on a fake container runtime (package
// realkubelet), at the kubelet's default lease (40 s) and status update
// period (10 s): it holds a third of FENCELINE_BENCH_PODS (what the
// busiest of three nodes holds in the KWOK row), and the replacements go
// to the two KWOK nodes. It needs root and `make node-tools`.
func BenchmarkFailoverNoHumanRealKubelet(b *testing.B) {
	if err := realkubelet.Available(); err != nil {
		b.Skip(err)
	}
	benchNoHuman(b, noHumanCase{onReal: true, loss: lossHang})
}

// noHumanCase is one variant of the no-human benchmark.
type noHumanCase struct {
	// onReal puts the lost node on a real kubelet.
	onReal bool
	loss   nodeLoss
	// slowAPI routes Fenceline's components through a proxy that delays
	// them by settings.APILatency from just before the loss.
	slowAPI bool
}

// nodeLoss is how the benchmark's node is lost.
type nodeLoss string

const (
	// lossHang: the node stops heartbeating and keeps running (a hang or
	// a partition); its BMC reads On.
	lossHang nodeLoss = "hang"
	// lossPower: the node loses its power; its BMC reads Off.
	lossPower nodeLoss = "power loss"
)

// realBenchNode is the real-kubelet node of the real-kubelet row.
const realBenchNode = "node-c"

func benchNoHuman(b *testing.B, nc noHumanCase) {
	onReal, loss := nc.onReal, nc.loss
	s := benchSetup(b)
	for _, bin := range []string{"fenceline-controller", "fenceline-fence-agent"} {
		if _, err := cluster.Binary(bin); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		var runs []noHumanRun
		for rep := 1; rep <= s.NoHumanReps; rep++ {
			ctx, cancel := context.WithTimeout(context.Background(), repetitionDeadline)
			start := time.Now()
			run, err := runNoHuman(ctx, s, nc, stopPoint(rep, s.NoHumanReps))
			cancel()
			if err != nil {
				b.Fatalf("no-human repetition %d: %v", rep, err)
			}
			run.Rep = rep
			runs = append(runs, run)
			b.Logf("no-human rep %d/%d: %d pods moved off %s; heartbeats stopped %.2fs into the renewal cycle, Lease renewed %.2fs, fenced %.2fs (reason %s, %d leader changes), NotReady %.2fs, replacements attached %.2fs after the heartbeat loss (wall %s)",
				rep, s.NoHumanReps, run.Moved, run.Victim, run.StopPoint.Seconds(), run.LastRenewal.Seconds(), run.Fenced.Seconds(), run.Reason, run.LeaderChanges, run.NotReady.Seconds(),
				run.Replacements.Seconds(), time.Since(start).Round(time.Second))
		}
		report := newNoHumanReport(s, runs)
		name, what := fmt.Sprintf("failover-nohuman-%dpods", s.Pods), fmt.Sprintf("%d pods over 3 nodes", s.Pods)
		if loss == lossPower {
			name, what = fmt.Sprintf("failover-nohuman-powerloss-%dpods", s.Pods), fmt.Sprintf("%d pods over 3 nodes, the node losing its power", s.Pods)
		}
		if nc.slowAPI {
			name = fmt.Sprintf("failover-nohuman-slowapi-%s-%dpods", s.APILatency, s.Pods)
			what = fmt.Sprintf("%d pods over 3 nodes, every request of Fenceline's components %s late", s.Pods, s.APILatency)
		}
		if onReal {
			name = fmt.Sprintf("failover-nohuman-realkubelet-%dpods", max(1, s.Pods/3))
			what = fmt.Sprintf("%d pods on a real-kubelet node (a third of %d, as the busiest of three nodes), replaced on 2 KWOK nodes", max(1, s.Pods/3), s.Pods)
		}
		fmt.Printf("\nFailover with no human at production-default timings, %s, %d repetitions (median [min–max]); %s\n%s\n",
			what, s.NoHumanReps, report.Machine, report.Table)
		path, err := writeResult(name, report)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
		b.ReportMetric(report.Summaries[nhReplacements].Median, "heartbeat-loss-to-attached-s")
	}
}

// noHumanReport is the JSON written to bench-results/.
type noHumanReport struct {
	Machine   machine            `json:"machine"`
	Settings  settings           `json:"settings"`
	Timings   map[string]string  `json:"timings"`
	Runs      []noHumanRun       `json:"runs"`
	Summaries map[string]Summary `json:"summaries"`
	Table     string             `json:"table"`
}

func newNoHumanReport(s settings, runs []noHumanRun) noHumanReport {
	r := noHumanReport{Machine: thisMachine(), Settings: s, Runs: runs, Summaries: map[string]Summary{}, Timings: productionTimings(s)}
	metrics := []struct {
		name string
		get  func(noHumanRun) time.Duration
	}{
		{nhCreated, func(r noHumanRun) time.Duration { return r.Created }},
		{nhAdmitted, func(r noHumanRun) time.Duration { return r.Admitted }},
		{nhFenced, func(r noHumanRun) time.Duration { return r.Fenced }},
		{nhNotReady, func(r noHumanRun) time.Duration { return r.NotReady }},
		{nhPodsDeleted, func(r noHumanRun) time.Duration { return r.PodsDeleted }},
		{nhUnpublished, func(r noHumanRun) time.Duration { return r.Unpublished }},
		{nhReplacements, func(r noHumanRun) time.Duration { return r.Replacements }},
		{nhFromFenced, func(r noHumanRun) time.Duration { return r.Replacements - r.Fenced }},
		{nhFromRenewal, func(r noHumanRun) time.Duration { return r.Replacements - r.LastRenewal }},
	}
	t := Table{Header: []string{"metric", "F, no human", "upstream, no human"}}
	for _, m := range metrics {
		var d []time.Duration
		for _, run := range runs {
			if v := m.get(run); v >= 0 { // negative: not seen during the run
				d = append(d, v)
			}
		}
		upstream := "n/a"
		if m.name == nhReplacements || m.name == nhFromRenewal {
			upstream = "never (pods stay Terminating)"
		}
		if len(d) == 0 {
			t.AddRow(m.name, "not reached before the run ended", upstream)
			continue
		}
		r.Summaries[m.name] = Summarize(d)
		t.AddRow(m.name, r.Summaries[m.name].String(), upstream)
	}
	r.Table = t.String()
	return r
}

// productionTimings records the timings the runs had, for the JSON.
func productionTimings(s settings) map[string]string {
	taintEviction := "fenceline-controller taint-eviction (kube-controller-manager's off), shipped defaults"
	if s.UpstreamTaintEviction {
		taintEviction = "kube-controller-manager taint-eviction-controller"
	}
	return map[string]string{
		"taint_eviction":          taintEviction,
		"node_lease_duration":     (prodLeaseSeconds * time.Second).String(),
		"lease_renew_interval":    prodRenewInterval.String(),
		"kube_controller_manager": fmt.Sprint(prodControllerManagerArgs),
		"pod_tolerations":         (prodTolerationSeconds * time.Second).String(),
		"fence_policy":            "shipped defaults (CRD defaults)",
		"fence_class":             "shipped defaults; method Redfish, insecureTLS for the simulated BMCs",
		"fenceline_controller":    "--force-eviction-ready-grace=" + forceeviction.DefaultReadyGrace.String(),
	}
}

// runNoHuman runs one repetition on a fresh cluster at production timings.
func runNoHuman(ctx context.Context, s settings, nc noHumanCase, stopAt time.Duration) (noHumanRun, error) {
	onReal, loss := nc.onReal, nc.loss
	var run noHumanRun
	copts := cluster.Options{
		ControllerManager: true, Scheduler: true, KWOK: true,
		NodeLeaseSeconds:           prodLeaseSeconds,
		ExtraControllerManagerArgs: prodControllerManagerArgs,
	}
	// FENCELINE_BENCH_AUDIT makes kube-apiserver keep an audit log (saved
	// with FENCELINE_BENCH_KEEP_LOGS): every request of the failover's
	// chain, with when the API server received and answered it.
	copts.AuditLog = os.Getenv("FENCELINE_BENCH_AUDIT") != ""
	if !s.UpstreamTaintEviction {
		// Fenceline's taint-eviction in place of kube-controller-manager's.
		copts.ExtraControllerManagerArgs = append(slices.Clone(prodControllerManagerArgs), world.UpstreamTaintEvictionOff)
	}
	err := withCluster(ctx, "bench-failover-nohuman", copts, func(c *cluster.Cluster) error {
		opts := world.Options{
			Fencing:       true,
			TaintEviction: !s.UpstreamTaintEviction,
			AttacherArgs:  attacherRateArgs(s),
			// The world matches the controller to its 5 s node-monitor
			// grace; here it is upstream's 50 s again, the flag's default.
			ControllerArgs: []string{"--force-eviction-ready-grace=" + forceeviction.DefaultReadyGrace.String()},
			WriteInterval:  benchWriteInterval,
			APIProxy:       nc.slowAPI,
		}
		// FENCELINE_BENCH_CONTROLLER_V raises fenceline-controller's log
		// verbosity (5 logs every idle decision with its recheck), to look
		// into a slow detection with FENCELINE_BENCH_KEEP_LOGS.
		if v := os.Getenv("FENCELINE_BENCH_CONTROLLER_V"); v != "" {
			opts.ControllerArgs = append(opts.ControllerArgs, "--v="+v)
		}
		if onReal {
			opts.Nodes, opts.RealKubelets = []string{"node-a", "node-b"}, []string{realBenchNode}
			opts.RealKubeletLeaseSeconds, opts.RealKubeletStatusUpdate = prodLeaseSeconds, 10*time.Second
		}
		w, err := world.Launch(ctx, c, opts)
		if w != nil {
			defer w.Stop()
		}
		if err != nil {
			return fmt.Errorf("starting the product: %w", err)
		}
		setup, err := setUpShippedFencing(ctx, w)
		if err != nil {
			return err
		}
		defer setup.Close()
		pin := ""
		if onReal {
			pin = realBenchNode
		}
		pods := s.Pods
		if onReal {
			// As many as the busiest of three nodes holds in the KWOK row.
			pods = max(1, s.Pods/3)
		}
		var delay time.Duration
		if nc.slowAPI {
			delay = s.APILatency / 2
		}
		return noHumanFailover(ctx, w, setup, noHumanScene{pods: pods, pin: pin, loss: loss, proxyDelay: delay, stopAt: stopAt}, &run)
	})
	return run, err
}

// setUpShippedFencing gives every node a Redfish BMC and FenceTarget, with
// a FenceClass and a FencePolicy at their shipped defaults: the class sets
// only its method and trusts the simulated BMCs' self-signed certificate;
// the policy is the world's without any of its test timings. It checks
// that the API server did default them.
func setUpShippedFencing(ctx context.Context, w *world.World) (*world.FencingSetup, error) {
	cs, err := w.InstallFencingCRDs(ctx)
	if err != nil {
		return nil, err
	}
	fc := &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: world.FenceClassRedfish},
		Spec: fencingv1alpha1.FenceClassSpec{
			Method:  fencingv1alpha1.FenceMethodRedfish,
			Redfish: &fencingv1alpha1.RedfishSettings{InsecureTLS: true},
		},
	}
	// Created first, so that SetUpFencing keeps it instead of the world's
	// class with test timeouts.
	if fc, err = cs.FencingV1alpha1().FenceClasses().Create(ctx, fc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating FenceClass %s: %w", world.FenceClassRedfish, err)
	}
	setup, err := w.SetUpFencing(ctx, world.BMCRedfish, nil, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.Detection = fencingv1alpha1.FenceDetection{}
		p.Spec.StormGuard = fencingv1alpha1.StormGuard{}
		p.Spec.Recovery = fencingv1alpha1.FenceRecovery{}
		for i := range p.Spec.Levels {
			p.Spec.Levels[i].Timeout = nil
		}
	})
	if err != nil {
		return nil, err
	}
	if d := setup.Policy.Spec.Detection.LeaseStaleAfter; d == nil || d.Duration != 20*time.Second {
		setup.Close()
		return nil, fmt.Errorf("FencePolicy leaseStaleAfter %v, want the shipped default 20s", d)
	}
	if t := fc.Spec.Timeouts; t.Action == nil || t.Verify == nil || t.PollInterval == nil {
		setup.Close()
		return nil, fmt.Errorf("FenceClass timeouts %+v were not defaulted", t)
	}
	return setup, nil
}

// noHumanFailover deploys the StatefulSet, loses the busiest node as loss
// says and records the failover into run.
// noHumanScene is what one no-human repetition deploys and does: pods of
// the StatefulSet (all on pin, when set), how the node is lost, and the
// delay each way of World.APIProxy from just before the loss, and how
// long after an observed Lease renewal the node is lost.
type noHumanScene struct {
	pods       int
	pin        string
	loss       nodeLoss
	proxyDelay time.Duration
	stopAt     time.Duration
}

func noHumanFailover(ctx context.Context, w *world.World, setup *world.FencingSetup, sc noHumanScene, run *noHumanRun) error {
	loss := sc.loss
	rec, v, err := deployForNoHuman(ctx, w, sc.pods, sc.pin)
	if err != nil {
		return err
	}
	run.Victim, run.Moved = v.Node, len(v.Pods)
	fr, err := startFenceRecorder(ctx, w.Cluster.Client(), setup.Client, v.Node)
	if err != nil {
		return err
	}
	// Where in the node's 10 s renewal cycle the heartbeats stop decides
	// up to 10 s of the figures from the heartbeat loss; each repetition
	// takes its own point (stopPoint) after a renewal it saw.
	if err := awaitRenewal(ctx, w.Cluster.Client(), v.Node); err != nil {
		return err
	}
	select {
	case <-time.After(sc.stopAt):
	case <-ctx.Done():
		return ctx.Err()
	}
	transitions, err := controllerLeaderTransitions(ctx, w)
	if err != nil {
		return err
	}
	if w.APIProxy != nil {
		w.APIProxy.SetDelay(sc.proxyDelay)
	}
	t0 := time.Now()
	if err := loseNode(ctx, w, setup, v.Node, loss); err != nil {
		return err
	}
	var p progress
	if err := world.WaitFor(ctx, noHumanTimeout, fmt.Sprintf("%d pods moved off %s with their volumes", len(v.Pods), v.Node), func(context.Context) (bool, error) {
		p = rec.progress(v)
		return p.done(), nil
	}); err != nil {
		return fmt.Errorf("%w; so far: %+v, fencing: %+v", err, p, fr.snapshot())
	}
	renewal, err := lastHeartbeat(ctx, w, v.Node)
	if err != nil {
		return err
	}
	unpublished, err := lastUnpublish(ctx, w, v, true)
	if err != nil {
		return err
	}
	f := fr.snapshot()
	if err := checkNoHumanFence(ctx, w, setup, v, t0, f.fenced); err != nil {
		return err
	}
	run.T0 = t0.UTC().Format(time.RFC3339Nano)
	run.StopPoint = sc.stopAt
	run.LastRenewal = renewal.Sub(t0)
	run.Created, run.Admitted, run.Fenced = since(t0, f.created), since(t0, f.admitted), since(t0, f.fenced)
	run.NotReady = since(t0, f.notReady)
	run.PodsDeleted, run.Unpublished = since(t0, p.PodsDeleted), since(t0, unpublished)
	run.Running, run.Replacements = since(t0, p.Running), since(t0, p.Replacements)
	run.Reason = f.reason
	after, err := controllerLeaderTransitions(ctx, w)
	if err != nil {
		return err
	}
	run.LeaderChanges = after - transitions
	return nil
}

// loseNode loses node: a hang (partition) or a power loss.
func loseNode(ctx context.Context, w *world.World, setup *world.FencingSetup, node string, loss nodeLoss) error {
	if loss == lossPower {
		bmc := setup.BMCs[node]
		if bmc == nil {
			return fmt.Errorf("no BMC for %s", node)
		}
		return bmc.PowerLoss(ctx)
	}
	return w.Partition(ctx, node)
}

// stopPoint is where in the renewal cycle repetition rep of reps stops the
// heartbeats: the middles of reps equal slices of the cycle. The points
// spread over the whole cycle, as random ones would, but two series of the
// same length (idle and slow API server, say) stop at the same points, so
// their figures from the heartbeat loss compare pair by pair.
func stopPoint(rep, reps int) time.Duration {
	return time.Duration(2*rep-1) * prodRenewInterval / time.Duration(2*reps)
}

// awaitRenewal returns once node's Lease has been renewed, as this process
// observes it: the start of a renewal cycle.
func awaitRenewal(ctx context.Context, cs kubernetes.Interface, node string) error {
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
			return leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
			return leases.Watch(ctx, o)
		},
	}
	var first *metav1.MicroTime
	seen := false
	_, err := watchtools.UntilWithSync(ctx, lw, &coordinationv1.Lease{}, nil, func(e watch.Event) (bool, error) {
		l, ok := e.Object.(*coordinationv1.Lease)
		if !ok {
			return false, nil
		}
		if !seen {
			first, seen = l.Spec.RenewTime, true
			return false, nil
		}
		return l.Spec.RenewTime != nil && (first == nil || !l.Spec.RenewTime.Equal(first)), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for a renewal of the Lease of %s: %w", node, err)
	}
	return nil
}

// controllerLeaderTransitions reads leaseTransitions of fenceline-controller's
// leader-election Lease; 0 when it runs without leader election.
func controllerLeaderTransitions(ctx context.Context, w *world.World) (int32, error) {
	l, err := w.Cluster.Client().CoordinationV1().Leases(world.Namespace).Get(ctx, "fenceline-controller", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading fenceline-controller's leader Lease: %w", err)
	}
	return ptr.Deref(l.Spec.LeaseTransitions, 0), nil
}

// deployForNoHuman creates the StatefulSet, its pods tolerating a lost node
// for the default 300 s, waits until all run, and picks the node with the
// most of them. With pin, every pod is placed there (the other nodes
// cordoned until they run).
func deployForNoHuman(ctx context.Context, w *world.World, pods int, pin string) (*recorder, victimState, error) {
	cs := w.Cluster.Client()
	if err := w.CreateNamespace(ctx, benchNamespace); err != nil {
		return nil, victimState{}, err
	}
	if err := w.CreateStorageClass(ctx); err != nil {
		return nil, victimState{}, err
	}
	if _, err := w.ProvisionStatefulSet(ctx, benchNamespace, statefulSetName, pods); err != nil {
		return nil, victimState{}, err
	}
	rec, err := startRecorder(ctx, cs, benchNamespace)
	if err != nil {
		return nil, victimState{}, err
	}
	uncordon := func(context.Context) error { return nil }
	if pin != "" {
		if uncordon, err = w.OnlyOn(ctx, pin); err != nil {
			return nil, victimState{}, err
		}
	}
	ss := world.StatefulSet(benchNamespace, statefulSetName, int32(pods))
	ss.Spec.Template.Spec.Tolerations = world.LostNodeTolerations(prodTolerationSeconds)
	if _, err := cs.AppsV1().StatefulSets(benchNamespace).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
		return nil, victimState{}, fmt.Errorf("creating the StatefulSet: %w", err)
	}
	startTimeout := time.Minute + time.Duration(pods)*2*time.Second
	if err := world.WaitFor(ctx, startTimeout, fmt.Sprintf("%d pods Running", pods), func(context.Context) (bool, error) {
		return len(rec.runningPods()) == pods, nil
	}); err != nil {
		return nil, victimState{}, err
	}
	if err := uncordon(ctx); err != nil {
		return nil, victimState{}, err
	}
	v, err := pickVictim(ctx, w, rec)
	return rec, v, err
}

// checkNoHumanFence checks, from the driver's audit log, that every volume
// of the lost node moved safely (invariant.Check: each unpublish while
// staged fenced, before the publish elsewhere, no old write accepted after
// it), that the node wrote nothing accepted once it was Fenced, and that
// the BMC did receive the power-off.
func checkNoHumanFence(ctx context.Context, w *world.World, setup *world.FencingSetup, v victimState, t0, fenced time.Time) error {
	recs, err := w.Audit()
	if err != nil {
		return err
	}
	for _, pv := range v.PVs {
		handle, err := volumeHandle(ctx, w, pv)
		if err != nil {
			return err
		}
		res := invariant.Check(recs, invariant.Failover{Volume: handle, From: v.Node, CutOff: t0})
		if err := res.Err(); err != nil {
			return fmt.Errorf("volume %s: %w", handle, err)
		}
		if res.Publish < 0 {
			return fmt.Errorf("volume %s was not published to another node", handle)
		}
	}
	if fenced.IsZero() {
		return fmt.Errorf("the FencingRequest of %s was never seen Fenced", v.Node)
	}
	afterFence := func(r audit.Record) bool { return r.Time.After(fenced) }
	if n := audit.Count(recs, audit.Method("Write"), audit.Node(v.Node), audit.OK(), afterFence); n != 0 {
		return fmt.Errorf("%d writes of %s accepted after its verified power-off", n, v.Node)
	}
	if !slices.ContainsFunc(setup.BMCs[v.Node].PowerCommands(), func(c world.PowerCommand) bool { return c.OK && c.Action == "ForceOff" }) {
		return fmt.Errorf("the BMC of %s accepted no ForceOff", v.Node)
	}
	return nil
}

// fenceSeen is when the fencing of one node was first seen, step by step.
type fenceSeen struct {
	created, admitted, fenced, notReady time.Time
	// reason is the FencingRequest's spec.reason: which detection rule
	// made the node a candidate.
	reason string
}

// fenceRecorder timestamps, as watch events arrive, the fencing of one
// node: its FencingRequest created, admitted and Fenced, and the node's
// Ready condition leaving True.
type fenceRecorder struct {
	node string
	mu   sync.Mutex
	seen fenceSeen
}

// startFenceRecorder starts informers on FencingRequests and Nodes that
// record the fencing of node; they stop with ctx.
func startFenceRecorder(ctx context.Context, cs kubernetes.Interface, fcs versioned.Interface, node string) (*fenceRecorder, error) {
	r := &fenceRecorder{node: node}
	ff := fencinginformers.NewSharedInformerFactory(fcs, 0)
	reqInf := ff.Fencing().V1alpha1().FencingRequests().Informer()
	kf := informers.NewSharedInformerFactory(cs, 0)
	nodeInf := kf.Core().V1().Nodes().Informer()
	if _, err := reqInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.request,
		UpdateFunc: func(_, obj any) { r.request(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching FencingRequests: %w", err)
	}
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { r.nodeSeen(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching Nodes: %w", err)
	}
	ff.Start(ctx.Done())
	kf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reqInf.HasSynced, nodeInf.HasSynced) {
		return nil, fmt.Errorf("syncing the fencing informers: %w", ctx.Err())
	}
	return r, nil
}

// mark sets *t to now unless it is set. Callers hold r.mu.
func mark(t *time.Time, now time.Time) {
	if t.IsZero() {
		*t = now
	}
}

func (r *fenceRecorder) snapshot() fenceSeen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

func (r *fenceRecorder) request(obj any) {
	req, ok := obj.(*fencingv1alpha1.FencingRequest)
	if !ok || req.Spec.NodeName != r.node {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	mark(&r.seen.created, now)
	if r.seen.reason == "" {
		r.seen.reason = req.Spec.Reason
	}
	switch req.Status.Phase {
	case fencingv1alpha1.FencingPhaseFencing:
		mark(&r.seen.admitted, now)
	case fencingv1alpha1.FencingPhaseFenced:
		mark(&r.seen.admitted, now)
		mark(&r.seen.fenced, now)
	}
}

func (r *fenceRecorder) nodeSeen(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != r.node {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			mark(&r.seen.notReady, now)
		}
	}
}
