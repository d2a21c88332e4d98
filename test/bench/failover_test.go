package bench

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// Deadlines of one failover repetition. They only bound a broken run; the
// figures themselves are measured, not asserted.
const (
	benchNamespace     = "bench"
	statefulSetName    = "db"
	nodeLostTimeout    = 30 * time.Second
	evictionTimeout    = 60 * time.Second
	failoverTimeout    = 4 * time.Minute
	repetitionDeadline = 10 * time.Minute
	// podGCPeriod is kube-controller-manager's fixed pod GC period
	// (gcCheckPeriod). Upstream force-deletes stuck pods only on its ticks,
	// so the operator's taint waits for a delay drawn uniformly from
	// [0, podGCPeriod) after the pods are stuck: without it every fresh
	// cluster would meet the taint at the same phase of the tick and the
	// figures would hide upstream's real spread.
	podGCPeriod = 20 * time.Second
	// benchWriteInterval keeps the kubelet stand-ins' data-plane writes
	// rare: they matter to the safety tests, not to these timings.
	benchWriteInterval = 5 * time.Second
)

// failoverConfig is one way of running the cluster through the same failover.
type failoverConfig struct {
	// Name is the column header: U, F or F-auto.
	Name string
	// Human is true when an operator adds the out-of-service taint once the
	// node's pods are stuck Terminating; false when nobody acts.
	Human bool
	// Fenced is true when every old volume must be fenced, false when a
	// plain unpublish is expected.
	Fenced bool
	// Storm runs the failover under a storm of routine attaches and
	// detaches (BenchmarkFailoverStorm), queued at the node's power-off.
	Storm bool
	opts  func(s settings, upstream string) world.Options
}

var failoverConfigs = []failoverConfig{
	{
		// Upstream: kube-controller-manager's pod GC and attach/detach
		// controller, external-attacher, and a driver that detaches on a
		// plain unpublish and cannot fence.
		Name: "U", Human: true,
		opts: func(s settings, upstream string) world.Options {
			return world.Options{
				AttacherPath:  upstream,
				AttacherArgs:  attacherRateArgs(s),
				NoController:  true,
				Driver:        world.DriverOptions{NoFence: true, NoForceUnpublish: true},
				WriteInterval: benchWriteInterval,
			}
		},
	},
	{
		// Fenceline with the operator's out-of-service taint.
		Name: "F", Human: true, Fenced: true,
		opts: func(s settings, _ string) world.Options {
			return world.Options{AttacherArgs: attacherRateArgs(s), WriteInterval: benchWriteInterval}
		},
	},
	{
		// Fenceline with a safe-detach driver and nobody acting.
		Name: "F-auto", Fenced: true,
		opts: func(s settings, _ string) world.Options {
			return world.Options{
				Driver:         world.DriverOptions{SafeDetach: true},
				AttacherArgs:   attacherRateArgs(s),
				ControllerArgs: []string{"--quarantine-delay=" + s.QuarantineDelay.String()},
				WriteInterval:  benchWriteInterval,
			}
		},
	},
}

// attacherRateArgs raises both attachers' client-side API rate limit when
// FENCELINE_BENCH_FAILOVER_QPS is set (burst twice that); by default they
// keep their shared defaults, 5 QPS and burst 10.
func attacherRateArgs(s settings) []string {
	if s.FailoverQPS == 0 {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.Itoa(s.FailoverQPS), "--kube-api-burst=" + strconv.Itoa(2*s.FailoverQPS)}
}

// failoverRun is one repetition's figures, each from T0: the out-of-service
// taint for U and F, the node's last heartbeat for F-auto.
type failoverRun struct {
	Config      string        `json:"config"`
	Rep         int           `json:"rep"`
	Victim      string        `json:"victim"`
	Moved       int           `json:"moved_pods"`
	T0          string        `json:"t0"`
	PodsDeleted time.Duration `json:"pods_deleted_ns"`
	VAsGone     time.Duration `json:"vas_gone_ns"`
	Unpublished time.Duration `json:"unpublished_ns"`
	// The replacements' stages, each for the last pod to reach it.
	Scheduled    time.Duration `json:"replacements_scheduled_ns"`
	VAsCreated   time.Duration `json:"new_vas_created_ns"`
	VAsAttached  time.Duration `json:"new_vas_attached_ns"`
	Running      time.Duration `json:"replacements_running_ns"`
	Replacements time.Duration `json:"replacements_attached_ns"`
	// storm is how much of the storm was done at the end, when there was
	// one.
	storm stormProgress
}

// Metric names, in table order.
const (
	mPodsDeleted  = "taint -> last stuck pod deleted"
	mVAsGone      = "taint -> last old VA gone"
	mUnpublished  = "taint -> last old volume unpublished (F: fenced)"
	mScheduled    = "taint -> last replacement scheduled"
	mVAsCreated   = "taint -> last new VA created"
	mVAsAttached  = "taint -> last new VA attached"
	mRunning      = "taint -> last replacement Running"
	mReplacements = "taint -> last replacement Running + attached"
	mAuto         = "heartbeat -> last replacement Running + attached, no human (F: safe-detach)"
)

// BenchmarkFailover measures a node loss under upstream and under Fenceline
// on the real local control plane: a StatefulSet of FENCELINE_BENCH_PODS
// pods, each with its own RWO volume, spread over three nodes; the node
// holding the most pods loses power. Configurations alternate within each
// repetition so that machine drift hits them alike.
func BenchmarkFailover(b *testing.B) {
	s := benchSetup(b)
	upstream, err := cluster.Tool(upstreamAttacher)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		runs := map[string][]failoverRun{}
		for rep := 1; rep <= s.Reps; rep++ {
			for _, cfg := range failoverConfigs {
				if !s.runs(cfg.Name) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), repetitionDeadline)
				start := time.Now()
				run, err := runFailover(ctx, cfg, s, upstream)
				cancel()
				if err != nil {
					b.Fatalf("%s repetition %d: %v", cfg.Name, rep, err)
				}
				run.Rep = rep
				runs[cfg.Name] = append(runs[cfg.Name], run)
				b.Logf("%s rep %d/%d: %d pods moved off %s; pods deleted %.2fs, VAs gone %.2fs, unpublished %.2fs, replacements attached %.2fs (wall %s)",
					cfg.Name, rep, s.Reps, run.Moved, run.Victim, run.PodsDeleted.Seconds(), run.VAsGone.Seconds(),
					run.Unpublished.Seconds(), run.Replacements.Seconds(), time.Since(start).Round(time.Second))
			}
		}
		report := newFailoverReport(s, runs)
		fmt.Printf("\nFailover, %d pods over 3 nodes, %d repetitions (median [min–max]); %s\n%s\n", s.Pods, s.Reps, report.Machine, report.Table)
		for _, name := range slices.Sorted(maps.Keys(report.Stages)) {
			fmt.Printf("\nWhere %s's failover waits (medians, each increment charged to the milestone that ends it):\n%s\n", name, report.Stages[name])
		}
		name := fmt.Sprintf("failover-%dpods", s.Pods)
		if s.FailoverQPS > 0 {
			name += fmt.Sprintf("-qps%d", s.FailoverQPS)
		}
		if s.KCMQPS > 0 {
			name += fmt.Sprintf("-kcmqps%d", s.KCMQPS)
		}
		path, err := writeResult(name, report)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
		b.ReportMetric(report.Summaries["U"][mReplacements].Median, "U-taint-to-attached-s")
		b.ReportMetric(report.Summaries["F"][mReplacements].Median, "F-taint-to-attached-s")
		b.ReportMetric(report.Summaries["F-auto"][mAuto].Median, "F-heartbeat-to-attached-s")
	}
}

// failoverReport is the JSON written to bench-results/.
type failoverReport struct {
	Machine   machine                       `json:"machine"`
	Settings  settings                      `json:"settings"`
	Runs      map[string][]failoverRun      `json:"runs"`
	Summaries map[string]map[string]Summary `json:"summaries"`
	Ratios    map[string]float64            `json:"ratios_u_over_f"`
	Table     string                        `json:"table"`
	// Stages is, per configuration with an operator, where the failover's
	// critical path waits and whose work each wait is.
	Stages map[string]string `json:"stages"`
}

func newFailoverReport(s settings, runs map[string][]failoverRun) failoverReport {
	r := failoverReport{Machine: thisMachine(), Settings: s, Runs: runs,
		Summaries: map[string]map[string]Summary{}, Ratios: map[string]float64{}}
	for name, rs := range runs {
		get := func(f func(failoverRun) time.Duration) Summary {
			var d []time.Duration
			for _, run := range rs {
				d = append(d, f(run))
			}
			return Summarize(d)
		}
		m := map[string]Summary{}
		if name == "F-auto" {
			m[mAuto] = get(func(r failoverRun) time.Duration { return r.Replacements })
		} else {
			m[mPodsDeleted] = get(func(r failoverRun) time.Duration { return r.PodsDeleted })
			m[mVAsGone] = get(func(r failoverRun) time.Duration { return r.VAsGone })
			m[mUnpublished] = get(func(r failoverRun) time.Duration { return r.Unpublished })
			m[mScheduled] = get(func(r failoverRun) time.Duration { return r.Scheduled })
			m[mVAsCreated] = get(func(r failoverRun) time.Duration { return r.VAsCreated })
			m[mVAsAttached] = get(func(r failoverRun) time.Duration { return r.VAsAttached })
			m[mRunning] = get(func(r failoverRun) time.Duration { return r.Running })
			m[mReplacements] = get(func(r failoverRun) time.Duration { return r.Replacements })
		}
		r.Summaries[name] = m
	}
	t := Table{Header: []string{"metric", "U (upstream)", "F (Fenceline)", "U/F"}}
	for _, metric := range []string{mPodsDeleted, mVAsGone, mUnpublished, mScheduled, mVAsCreated, mVAsAttached, mRunning, mReplacements} {
		u, f := r.Summaries["U"][metric], r.Summaries["F"][metric]
		ratio := Ratio(u.Median, f.Median)
		r.Ratios[metric] = ratio
		t.AddRow(metric, u.String(), f.String(), FormatRatio(ratio))
	}
	t.AddRow(mAuto, "never (pods stay Terminating)", r.Summaries["F-auto"][mAuto].String(), "n/a")
	r.Table = t.String()
	r.Stages = map[string]string{}
	for _, name := range []string{"U", "F"} {
		if m, ok := r.Summaries[name]; ok {
			r.Stages[name] = StageTable(Stages("taint", failoverMilestones(name, m)))
		}
	}
	return r
}

// failoverMilestones names who ends each stage of a failover: the pods'
// deletion is pod GC's (kube-controller-manager) under U and
// fenceline-controller's under F; the rest is the same pipeline.
func failoverMilestones(config string, m map[string]Summary) []Milestone {
	deleter := "kube-controller-manager (pod GC)"
	if config != "U" {
		deleter = "fenceline-controller"
	}
	owners := []struct{ metric, owner string }{
		{mPodsDeleted, deleter},
		{mVAsGone, "kube-controller-manager (attach/detach) + attacher"},
		{mUnpublished, "attacher + driver"},
		{mScheduled, "kube-controller-manager (StatefulSet) + scheduler"},
		{mVAsCreated, "kube-controller-manager (attach/detach)"},
		{mVAsAttached, "attacher + driver"},
		{mRunning, "kubelet"},
	}
	var out []Milestone
	for _, o := range owners {
		if s, ok := m[o.metric]; ok && s.N > 0 {
			out = append(out, Milestone{Name: strings.TrimPrefix(o.metric, "taint -> "), Seconds: s.Median, Owner: o.owner})
		}
	}
	return out
}

// runFailover runs one repetition of cfg on a fresh cluster.
func runFailover(ctx context.Context, cfg failoverConfig, s settings, upstream string) (failoverRun, error) {
	run := failoverRun{Config: cfg.Name}
	copts := cluster.Options{ControllerManager: true, Scheduler: true, KWOK: true}
	if s.KCMQPS > 0 {
		copts.ExtraControllerManagerArgs = []string{"--kube-api-qps=" + strconv.Itoa(s.KCMQPS), "--kube-api-burst=" + strconv.Itoa(2*s.KCMQPS)}
	}
	err := withCluster(ctx, "bench-failover-"+cfg.Name, copts, func(c *cluster.Cluster) error {
		w, err := world.Launch(ctx, c, cfg.opts(s, upstream))
		if w != nil {
			defer w.Stop()
		}
		if err != nil {
			return fmt.Errorf("starting the product: %w", err)
		}
		return failover(ctx, w, cfg, s, &run)
	})
	return run, err
}

// failover deploys the StatefulSet, cuts the busiest node's power and
// records the failover into run.
func failover(ctx context.Context, w *world.World, cfg failoverConfig, s settings, run *failoverRun) error {
	cs := w.Cluster.Client()
	pods := s.Pods
	if err := w.CreateNamespace(ctx, benchNamespace); err != nil {
		return err
	}
	if err := w.CreateStorageClass(ctx); err != nil {
		return err
	}
	if _, err := w.ProvisionStatefulSet(ctx, benchNamespace, statefulSetName, pods); err != nil {
		return err
	}
	rec, err := startRecorder(ctx, cs, benchNamespace)
	if err != nil {
		return err
	}
	if _, err := cs.AppsV1().StatefulSets(benchNamespace).Create(ctx, world.StatefulSet(benchNamespace, statefulSetName, int32(pods)), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the StatefulSet: %w", err)
	}
	startTimeout := time.Minute + time.Duration(pods)*2*time.Second
	if err := world.WaitFor(ctx, startTimeout, fmt.Sprintf("%d pods Running", pods), func(context.Context) (bool, error) {
		return len(rec.runningPods()) == pods, nil
	}); err != nil {
		return err
	}
	v, err := pickVictim(ctx, w, rec)
	if err != nil {
		return err
	}
	run.Victim, run.Moved = v.Node, len(v.Pods)
	var st *storm
	timeout := failoverTimeout
	if cfg.Storm {
		if st, err = prepareStorm(ctx, w, v.Node, s.Storm); err != nil {
			return fmt.Errorf("preparing the storm: %w", err)
		}
		timeout = stormFailoverTimeout
	}

	if err := w.PowerOff(ctx, v.Node); err != nil {
		return err
	}
	stormErr := make(chan error, 1)
	if st != nil {
		go func() { stormErr <- st.start(ctx) }()
	} else {
		stormErr <- nil
	}
	var t0 time.Time
	if cfg.Human {
		if err := w.Cluster.WaitNodeReady(ctx, v.Node, corev1.ConditionUnknown, nodeLostTimeout); err != nil {
			return err
		}
		// The operator acts once the pods are stuck: taint eviction has
		// marked them Terminating and nothing will confirm the deletion.
		if err := world.WaitFor(ctx, evictionTimeout, "pods on "+v.Node+" Terminating", func(ctx context.Context) (bool, error) {
			return allTerminating(rec, v), nil
		}); err != nil {
			return err
		}
		select {
		case <-time.After(rand.N(podGCPeriod)):
		case <-ctx.Done():
			return ctx.Err()
		}
		t0 = time.Now()
		if err := w.AddTaint(ctx, v.Node, world.OutOfServiceTaint); err != nil {
			return err
		}
	}
	var p progress
	if err := world.WaitFor(ctx, timeout, fmt.Sprintf("%d pods moved off %s with their volumes", len(v.Pods), v.Node), func(context.Context) (bool, error) {
		p = rec.progress(v)
		return p.done(), nil
	}); err != nil {
		return fmt.Errorf("%w; so far: %+v", err, p)
	}
	if st != nil {
		run.storm = st.progress(rec)
	}
	if err := <-stormErr; err != nil {
		return fmt.Errorf("queueing the storm: %w", err)
	}
	if !cfg.Human {
		if t0, err = lastHeartbeat(ctx, w, v.Node); err != nil {
			return err
		}
	}
	unpublished, err := lastUnpublish(ctx, w, v, cfg.Fenced)
	if err != nil {
		return err
	}
	run.T0 = t0.UTC().Format(time.RFC3339Nano)
	run.PodsDeleted = since(t0, p.PodsDeleted)
	run.VAsGone = since(t0, p.VAsGone)
	run.Unpublished = since(t0, unpublished)
	run.Scheduled = since(t0, p.Scheduled)
	run.VAsCreated = since(t0, p.VAsCreated)
	run.VAsAttached = since(t0, p.VAsAttached)
	run.Running = since(t0, p.Running)
	run.Replacements = since(t0, p.Replacements)
	return nil
}

// pickVictim chooses the node running the most pods and records what is
// on it.
func pickVictim(ctx context.Context, w *world.World, rec *recorder) (victimState, error) {
	byNode := map[string][]*corev1.Pod{}
	for _, p := range rec.runningPods() {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	nodes := slices.Sorted(maps.Keys(byNode))
	victim := slices.MaxFunc(nodes, func(a, b string) int { return len(byNode[a]) - len(byNode[b]) })
	v := victimState{Node: victim, Pods: map[string]types.UID{}, PVs: map[string]string{}}
	for _, p := range byNode[victim] {
		v.Pods[p.Name] = p.UID
		claim := fmt.Sprintf("%s-%s", world.ClaimTemplate, p.Name)
		pvc, err := w.Cluster.Client().CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return v, fmt.Errorf("getting claim %s: %w", claim, err)
		}
		v.PVs[p.Name] = pvc.Spec.VolumeName
	}
	for _, va := range rec.attachmentsOn(victim) {
		v.VAs = append(v.VAs, va.UID)
	}
	if len(v.VAs) != len(v.Pods) {
		return v, fmt.Errorf("%d VolumeAttachments on %s for %d pods", len(v.VAs), victim, len(v.Pods))
	}
	return v, nil
}

func allTerminating(rec *recorder, v victimState) bool {
	for name, uid := range v.Pods {
		obj, ok, err := rec.pods.GetByKey(benchNamespace + "/" + name)
		if err != nil || !ok {
			return false
		}
		p := obj.(*corev1.Pod)
		if p.UID != uid || p.DeletionTimestamp == nil {
			return false
		}
	}
	return true
}

// lastHeartbeat returns when the control plane last heard from node: the
// later of its Lease renewal and its Ready condition's heartbeat.
func lastHeartbeat(ctx context.Context, w *world.World, node string) (time.Time, error) {
	cs := w.Cluster.Client()
	lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("getting the node lease of %s: %w", node, err)
	}
	var last time.Time
	if lease.Spec.RenewTime != nil {
		last = lease.Spec.RenewTime.Time
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("getting node %s: %w", node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.LastHeartbeatTime.After(last) {
			last = c.LastHeartbeatTime.Time
		}
	}
	if last.IsZero() {
		return last, fmt.Errorf("node %s has neither a lease renewal nor a heartbeat", node)
	}
	return last, nil
}

// lastUnpublish returns when the driver last finished unpublishing one of
// the lost node's volumes (each volume's first successful unpublish from
// that node, fenced when fenced is set); every volume must have one.
func lastUnpublish(ctx context.Context, w *world.World, v victimState, fenced bool) (time.Time, error) {
	recs, err := w.Audit()
	if err != nil {
		return time.Time{}, err
	}
	pvs := slices.Collect(maps.Values(v.PVs))
	var last time.Time
	for _, pv := range pvs {
		handle, err := volumeHandle(ctx, w, pv)
		if err != nil {
			return last, err
		}
		preds := []audit.Predicate{audit.Method("ControllerUnpublishVolume"), audit.Volume(handle), audit.Node(v.Node), audit.OK()}
		if fenced {
			preds = append(preds, audit.Fenced())
		}
		i := audit.FirstIndex(recs, preds...)
		if i < 0 {
			return last, fmt.Errorf("no successful unpublish (fenced=%t) of %s from %s in the driver's audit log", fenced, handle, v.Node)
		}
		if recs[i].Time.After(last) {
			last = recs[i].Time
		}
	}
	return last, nil
}

func volumeHandle(ctx context.Context, w *world.World, pv string) (string, error) {
	obj, err := w.Cluster.Client().CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting PV %s: %w", pv, err)
	}
	if obj.Spec.CSI == nil {
		return "", fmt.Errorf("PV %s is not a CSI volume", pv)
	}
	return obj.Spec.CSI.VolumeHandle, nil
}
