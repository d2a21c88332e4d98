package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// The components BenchmarkScaleAttacher measures, by the names its report
// uses, and the binaries they run.
var vaScaleComponents = map[string]string{
	"attacher":    "fenceline-attacher",
	"controller":  "fenceline-controller",
	"fence-agent": "fenceline-fence-agent",
}

// vaScaleRun is one VolumeAttachment count's figures.
type vaScaleRun struct {
	VAs int `json:"vas"`
	// Nodes hold the VolumeAttachments that stay; the victim, holding
	// VictimVAs of them, is not counted.
	Nodes     int `json:"nodes"`
	VictimVAs int `json:"victim_vas"`
	// How long building took: the nodes Ready; the volumes on the array
	// with their PersistentVolumes and claims.
	NodesReady     time.Duration `json:"nodes_ready_ns"`
	VolumesCreated time.Duration `json:"volumes_created_ns"`
	// VAsCreated is how long creating the VolumeAttachments took, Attach
	// from the first create to the last VolumeAttachment attached.
	VAsCreated time.Duration `json:"vas_created_ns"`
	Attach     time.Duration `json:"attach_ns"`
	AttachRate float64       `json:"attach_per_s"`
	// AttachRequestsPerVA is the attacher's API requests over the attach
	// phase per VolumeAttachment (its requests at rest included).
	AttachRequestsPerVA float64 `json:"attach_requests_per_va"`
	// The lost node's fenced detach: from the out-of-service taint to the
	// last fenced ControllerUnpublishVolume and to the last of its
	// VolumeAttachments gone.
	T0         string         `json:"t0"`
	VAsFenced  time.Duration  `json:"vas_fenced_ns"`
	VAsGone    time.Duration  `json:"vas_gone_ns"`
	Attacher   componentUsage `json:"attacher"`
	Controller componentUsage `json:"controller"`
	FenceAgent componentUsage `json:"fence_agent"`
	// Processes is every process's usage over the idle window, by name.
	Processes map[string]usage `json:"processes"`
}

// vaNodes is how many nodes hold n VolumeAttachments (the victim aside).
func vaNodes(s vaScaleSettings, n int) int {
	return (n + s.VAsPerNode - 1) / s.VAsPerNode
}

// BenchmarkScaleAttacher measures fenceline-attacher serving many
// VolumeAttachments: for each of FENCELINE_BENCH_SCALE_VAS, a fresh control
// plane (etcd, kube-apiserver, KWOK at production node timings) with a
// KWOK node per FENCELINE_BENCH_SCALE_VAS_PER_NODE VolumeAttachments, and
// fenceline-attacher, fenceline-controller and fenceline-fence-agent as
// deployed (leader election, --v=2), the attacher at
// FENCELINE_BENCH_SCALE_ATTACHER_QPS. No kube-controller-manager runs: the
// benchmark plays the attach/detach controller, as in
// BenchmarkAttachThroughput, so nothing but the attacher touches the
// VolumeAttachments it creates. For every VolumeAttachment it creates a
// volume on the mock array, a PersistentVolume and its claim, then times
// the attacher attaching them all; it reads CPU, memory and API requests
// at rest over the idle window; then the victim node, holding
// FENCELINE_BENCH_SCALE_VICTIM_PODS of the VolumeAttachments, loses power,
// an operator adds the out-of-service taint, its VolumeAttachments are
// deleted as the attach/detach controller deletes them, and it times their
// fenced unpublish.
func BenchmarkScaleAttacher(b *testing.B) {
	if testing.Short() {
		b.Skip("benchmark needs a control plane; skipped with -short")
	}
	for _, tool := range []string{"etcd", "kube-apiserver", "kwok"} {
		if _, err := cluster.Tool(tool); err != nil {
			b.Fatalf("%v (run `make bench-scale-attacher`, which builds it)", err)
		}
	}
	for _, bin := range []string{"fenceline-attacher", "fenceline-controller", "fenceline-fence-agent", "mock-driver"} {
		if _, err := cluster.Binary(bin); err != nil {
			b.Fatal(err)
		}
	}
	s, err := loadVAScaleSettings()
	if err != nil {
		b.Fatal(err)
	}
	counts := make([]string, len(s.VAs))
	for i, n := range s.VAs {
		counts[i] = strconv.Itoa(n)
	}
	name := "scale-attacher-" + strings.Join(counts, "_") + "vas"
	for range b.N {
		var runs []vaScaleRun
		for _, n := range s.VAs {
			ctx, cancel := context.WithTimeout(context.Background(), vaScaleDeadline(s, n))
			start := time.Now()
			run, err := runVAScale(ctx, s, n)
			cancel()
			if err != nil {
				b.Fatalf("%d VolumeAttachments: %v", n, err)
			}
			runs = append(runs, run)
			b.Logf("%d VolumeAttachments on %d nodes: attached in %s (%.1f/s); lost node's %d fenced %.2fs after the taint; attacher %.1f%% CPU, %.0f MB (peak %.0f); controller %.0f MB (wall %s)",
				n, run.Nodes, run.Attach.Round(time.Second), run.AttachRate, run.VictimVAs, run.VAsFenced.Seconds(),
				run.Attacher.CPUPercent, run.Attacher.RSSMB, run.Attacher.PeakRSSMB, run.Controller.RSSMB, time.Since(start).Round(time.Second))
			// Written after every count, so that a failure at a larger
			// one (an hour in) keeps the figures of the smaller ones.
			if _, err := writeResult(name, newVAScaleReport(s, runs)); err != nil {
				b.Fatal(err)
			}
		}
		report := newVAScaleReport(s, runs)
		fmt.Printf("\nAttacher scale, %d VolumeAttachments a node, %d on the lost node, fenceline-attacher --kube-api-qps=%d --kube-api-burst=%d, idle window %s; %s\n%s\n%s\n%s\n",
			s.VAsPerNode, s.VictimVAs, s.AttacherQPS, s.AttacherBurst, s.Idle, report.Machine, report.Table, strings.Join(report.Verdicts, "\n"), report.Context)
		path, err := writeResult(name, report)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
		for _, r := range runs {
			b.ReportMetric(r.Attach.Seconds(), fmt.Sprintf("%dvas-attach-s", r.VAs))
			b.ReportMetric(r.VAsFenced.Seconds(), fmt.Sprintf("%dvas-fenced-s", r.VAs))
			b.ReportMetric(r.Attacher.RSSMB, fmt.Sprintf("%dvas-attacher-rss-MB", r.VAs))
		}
	}
}

// vaScaleDeadline bounds one count's run; only a broken run comes near
// it. An attach costs three writes at the attacher's QPS; the deadline
// allows twice that.
func vaScaleDeadline(s vaScaleSettings, n int) time.Duration {
	return 20*time.Minute + s.Idle + time.Duration(vaNodes(s, n))*20*time.Millisecond +
		time.Duration(n)*(30*time.Millisecond+6*time.Second/time.Duration(s.AttacherQPS))
}

// runVAScale builds one count on a fresh control plane and measures it.
func runVAScale(ctx context.Context, s vaScaleSettings, n int) (vaScaleRun, error) {
	run := vaScaleRun{VAs: n, Nodes: vaNodes(s, n), VictimVAs: s.VictimVAs}
	copts := cluster.Options{
		KWOK:               true,
		NodeLeaseSeconds:   s.LeaseSeconds,
		KWOKParallelism:    kwokParallelism,
		NodeStatusInterval: nodeStatusInterval,
	}
	err := withCluster(ctx, fmt.Sprintf("bench-scale-%dvas", n), copts, func(c *cluster.Cluster) error {
		cs, err := scaleClient(c)
		if err != nil {
			return err
		}
		nodes, err := watchNodes(ctx, cs)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := createFillerNodes(ctx, cs, run.Nodes); err != nil {
			nodes.stop()
			return err
		}
		err = nodes.waitReady(ctx, run.Nodes)
		// Without kube-controller-manager no node loses Ready: nothing to
		// count.
		nodes.stop()
		if err != nil {
			return err
		}
		run.NodesReady = time.Since(start)

		w, err := world.Launch(ctx, c, vaScaleWorld(c, s, n, run.Nodes))
		if w != nil {
			defer w.Stop()
		}
		if err != nil {
			return fmt.Errorf("starting the product: %w", err)
		}
		if err := w.ControllerRunning(ctx, 5*time.Minute); err != nil {
			return err
		}
		components, err := vaScaleURLs(w)
		if err != nil {
			return err
		}

		start = time.Now()
		if err := createScaleVolumes(ctx, w, cs, s, n, run.Nodes); err != nil {
			return err
		}
		run.VolumesCreated = time.Since(start)

		vas, err := watchAttachments(ctx, cs)
		if err != nil {
			return err
		}
		defer vas.stop()
		before, err := scrape(ctx, components["attacher"], restClientRequests)
		if err != nil {
			return err
		}
		start = time.Now()
		if err := createScaleVAs(ctx, cs, s, n, run.Nodes); err != nil {
			return err
		}
		run.VAsCreated = time.Since(start)
		if err := vas.waitAttached(ctx, w.Attacher, n, 5*time.Minute+time.Duration(n)*6*time.Second/time.Duration(s.AttacherQPS)); err != nil {
			return err
		}
		run.Attach = vas.lastAttached().Sub(start)
		run.AttachRate = float64(n) / run.Attach.Seconds()
		after, err := scrape(ctx, components["attacher"], restClientRequests)
		if err != nil {
			return err
		}
		run.AttachRequestsPerVA = (after - before) / float64(n)

		klog.InfoS("VolumeAttachments attached; settling before the idle window", "vas", n, "settle", scaleSettle)
		if err := sleep(ctx, scaleSettle); err != nil {
			return err
		}
		rest, err := measureIdle(ctx, c, w, components, s.Idle)
		if err != nil {
			return err
		}
		run.Processes = rest.usage
		procs := map[string]string{"attacher": w.Attacher.Name, "controller": w.Controller.Name, "fence-agent": w.FenceAgent.Name}
		for name, dst := range map[string]*componentUsage{"attacher": &run.Attacher, "controller": &run.Controller, "fence-agent": &run.FenceAgent} {
			*dst = componentUsage{usage: rest.usage[procs[name]], HeapMB: rest.heaps[name], HeapLiveMB: rest.live[name], RequestsPerMin: rest.rates[name] * 60}
		}

		// The node loses power; an operator adds the out-of-service taint
		// and the attach/detach controller, seeing it, deletes the node's
		// VolumeAttachments at once.
		if err := w.PowerOff(ctx, scaleVictim); err != nil {
			return err
		}
		reqBefore, err := scrapeAll(ctx, components)
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := w.AddTaint(ctx, scaleVictim, world.OutOfServiceTaint); err != nil {
			return err
		}
		victims := make([]string, s.VictimVAs)
		for i := range victims {
			victims[i] = "va-" + scaleVolumeName(i)
		}
		if err := parallel(ctx, len(victims), func(ctx context.Context, i int) error {
			if err := cs.StorageV1().VolumeAttachments().Delete(ctx, victims[i], metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting VolumeAttachment %s: %w", victims[i], err)
			}
			return nil
		}); err != nil {
			return err
		}
		gone, err := vas.waitGone(ctx, w.Attacher, victims, scaleReactionTimeout)
		if err != nil {
			return err
		}
		fenced, err := lastFencedUnpublish(w, scaleVictim, s.VictimVAs)
		if err != nil {
			return err
		}
		run.T0 = t0.UTC().Format(time.RFC3339Nano)
		run.VAsFenced = since(t0, fenced)
		run.VAsGone = since(t0, gone)
		if err := sleep(ctx, scaleAfterReaction); err != nil {
			return err
		}
		reqAfter, err := scrapeAll(ctx, components)
		if err != nil {
			return err
		}
		elapsed := time.Since(t0).Seconds()
		for name, dst := range map[string]*componentUsage{"attacher": &run.Attacher, "controller": &run.Controller, "fence-agent": &run.FenceAgent} {
			dst.ReactionRequests = reqAfter[name] - reqBefore[name] - rest.rates[name]*elapsed
		}
		return nil
	})
	return run, err
}

// vaScaleWorld runs the product as the deploy manifests do (leader
// election, --v=2, the fence agent's 60 s probe) with the victim as the
// world's one node. The mock driver keeps its state in memory (saving
// 50,000 volumes on every change would make the driver the bottleneck)
// and knows the filler nodes through a node socket each, which nothing
// uses: the array attaches only to nodes it knows. Its capacity holds the
// n volumes.
func vaScaleWorld(c *cluster.Cluster, s vaScaleSettings, n, nodes int) world.Options {
	driverArgs := []string{"--memory-state", "--v=1", "--capacity=" + strconv.FormatInt(int64(n)*world.VolumeSize, 10)}
	dir := filepath.Join(c.Dir(), "vsock")
	for i := range nodes {
		driverArgs = append(driverArgs, "--node-endpoint="+fillerNode(i)+"=unix://"+filepath.Join(dir, fillerNode(i)+".sock"))
	}
	leader := []string{"--leader-election", "--leader-election-namespace=" + world.Namespace}
	return world.Options{
		Nodes:  []string{scaleVictim},
		Driver: world.DriverOptions{Args: driverArgs},
		AttacherArgs: []string{"--v=2", "--leader-election",
			"--kube-api-qps=" + strconv.Itoa(s.AttacherQPS), "--kube-api-burst=" + strconv.Itoa(s.AttacherBurst)},
		ControllerArgs: append([]string{"--v=2", "--force-eviction-ready-grace=" + forceeviction.DefaultReadyGrace.String()}, leader...),
		Fencing:        true,
		FenceAgentArgs: append([]string{"--v=2", "--probe-interval=60s"}, leader...),
		Metrics:        true,
		WriteInterval:  benchWriteInterval,
	}
}

// vaScaleURLs returns the /metrics URL of each measured component.
func vaScaleURLs(w *world.World) (map[string]string, error) {
	byBinary := map[string]string{}
	for _, e := range w.MetricsEndpoints() {
		byBinary[e.Binary] = "http://" + e.Address + "/metrics"
	}
	out := map[string]string{}
	for name, bin := range vaScaleComponents {
		url, ok := byBinary[bin]
		if !ok {
			return nil, fmt.Errorf("%s serves no metrics in this world", bin)
		}
		out[name] = url
	}
	return out, nil
}

// scaleVolumeName names the i-th volume, and after it its PersistentVolume
// (pv-), claim (data-) and VolumeAttachment (va-). The first VictimVAs are
// the victim's.
func scaleVolumeName(i int) string { return fmt.Sprintf("scale-%06d", i) }

// scaleVolumeNode is the node of the i-th VolumeAttachment: the victim's
// first, then round-robin over the filler nodes.
func scaleVolumeNode(s vaScaleSettings, nodes, i int) string {
	if i < s.VictimVAs {
		return scaleVictim
	}
	return fillerNode((i - s.VictimVAs) % nodes)
}

// createScaleVolumes creates n volumes on the array and, for each, a
// PersistentVolume pre-bound to its claim and the claim, as a provisioner
// would have left them. No kube-controller-manager binds the claims: they
// stay Pending, which no component measured here minds.
func createScaleVolumes(ctx context.Context, w *world.World, cs kubernetes.Interface, s vaScaleSettings, n, nodes int) error {
	if err := w.CreateNamespace(ctx, benchNamespace); err != nil {
		return err
	}
	if err := w.CreateStorageClass(ctx); err != nil {
		return err
	}
	conn, err := grpc.NewClient(w.ControllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to the driver: %w", err)
	}
	defer conn.Close()
	ctrl := csi.NewControllerClient(conn)
	size := *resource.NewQuantity(world.VolumeSize, resource.BinarySI)
	klog.InfoS("Creating volumes, PersistentVolumes and claims", "volumes", n)
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		name := scaleVolumeName(i)
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name:          name,
			CapacityRange: &csi.CapacityRange{RequiredBytes: world.VolumeSize},
			VolumeCapabilities: []*csi.VolumeCapability{{
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			}},
		})
		if err != nil {
			return fmt.Errorf("CreateVolume %s: %w", name, err)
		}
		claim := "data-" + name
		return createBoundClaim(ctx, cs, "pv-"+name, claim, resp.GetVolume().GetVolumeId(), size)
	})
}

// createScaleVAs creates the n VolumeAttachments, as the attach/detach
// controller would for pods that use the claims.
func createScaleVAs(ctx context.Context, cs kubernetes.Interface, s vaScaleSettings, n, nodes int) error {
	klog.InfoS("Creating VolumeAttachments", "vas", n, "nodes", nodes)
	return parallel(ctx, n, func(ctx context.Context, i int) error {
		name := scaleVolumeName(i)
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: "va-" + name},
			Spec: storagev1.VolumeAttachmentSpec{
				Attacher: world.DriverName,
				NodeName: scaleVolumeNode(s, nodes, i),
				Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + name)},
			},
		}
		if _, err := cs.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating VolumeAttachment %s: %w", va.Name, err)
		}
		return nil
	})
}

// lastFencedUnpublish returns the time of the last successful fenced
// ControllerUnpublishVolume from node in the driver's audit log, once there
// is one for each of want volumes. A successful plain unpublish from node
// is an error: every detach from it had a reason to be fenced.
func lastFencedUnpublish(w *world.World, node string, want int) (time.Time, error) {
	recs, err := w.Audit()
	if err != nil {
		return time.Time{}, err
	}
	unpublishes := audit.Filter(recs, audit.Method("ControllerUnpublishVolume"), audit.Node(node), audit.OK())
	var last time.Time
	fenced := map[string]bool{}
	for _, r := range unpublishes {
		if !r.Fence {
			return last, fmt.Errorf("a plain ControllerUnpublishVolume of %s from %s at %s", r.VolumeID, node, r.Time.Format(time.RFC3339Nano))
		}
		fenced[r.VolumeID] = true
		if r.Time.After(last) {
			last = r.Time
		}
	}
	if len(fenced) != want {
		return last, fmt.Errorf("%d volumes fenced off %s in the driver's audit log, want %d", len(fenced), node, want)
	}
	return last, nil
}

// vaWatch follows VolumeAttachments through a watch whose cache keeps
// only each one's name and whether it is attached: how many were seen
// attached, when the last was, and when each was deleted.
type vaWatch struct {
	mu       sync.Mutex
	attached map[string]bool
	lastAtt  time.Time
	deleted  map[string]time.Time
	stop     func()
}

// watchAttachments starts a vaWatch; stop ends it.
func watchAttachments(ctx context.Context, cs kubernetes.Interface) (*vaWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	v := &vaWatch{attached: map[string]bool{}, deleted: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(func(obj any) (any, error) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok {
			return obj, nil
		}
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: va.Name, ResourceVersion: va.ResourceVersion},
			Status: storagev1.VolumeAttachmentStatus{Attached: va.Status.Attached}}, nil
	}))
	v.stop = func() { cancel(); f.Shutdown() }
	seen := func(obj any) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok || !va.Status.Attached {
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if !v.attached[va.Name] {
			v.attached[va.Name] = true
			v.lastAtt = time.Now()
		}
	}
	if _, err := f.Storage().V1().VolumeAttachments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if va, ok := obj.(*storagev1.VolumeAttachment); ok {
				v.mu.Lock()
				v.deleted[va.Name] = time.Now()
				v.mu.Unlock()
			}
		},
	}); err != nil {
		v.stop()
		return nil, fmt.Errorf("watching VolumeAttachments: %w", err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			v.stop()
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	return v, nil
}

func (v *vaWatch) lastAttached() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastAtt
}

// waitAttached waits until n VolumeAttachments were seen attached, logging
// progress every 30 s; it fails at once if the attacher exits.
func (v *vaWatch) waitAttached(ctx context.Context, attacher *cluster.Process, n int, timeout time.Duration) error {
	last := time.Now()
	return poll(ctx, timeout, fmt.Sprintf("%d VolumeAttachments attached", n), func(context.Context) (bool, error) {
		if exited, err := attacher.Exited(); exited {
			return false, fmt.Errorf("%s exited (%v); see %s", attacher.Name, err, attacher.LogPath)
		}
		v.mu.Lock()
		got := len(v.attached)
		v.mu.Unlock()
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			klog.InfoS("Waiting for VolumeAttachments attached", "attached", got, "of", n)
		}
		return got >= n, nil
	})
}

// waitGone waits until every VolumeAttachment of names was deleted and
// returns when the last one was.
func (v *vaWatch) waitGone(ctx context.Context, attacher *cluster.Process, names []string, timeout time.Duration) (time.Time, error) {
	var last time.Time
	err := poll(ctx, timeout, fmt.Sprintf("%d VolumeAttachments gone", len(names)), func(context.Context) (bool, error) {
		if exited, err := attacher.Exited(); exited {
			return false, fmt.Errorf("%s exited (%v); see %s", attacher.Name, err, attacher.LogPath)
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		last = time.Time{}
		for _, name := range names {
			t, ok := v.deleted[name]
			if !ok {
				return false, nil
			}
			if t.After(last) {
				last = t
			}
		}
		return true, nil
	})
	return last, err
}

// vaScaleReport is the JSON written to bench-results/.
type vaScaleReport struct {
	Machine  machine         `json:"machine"`
	Settings vaScaleSettings `json:"settings"`
	Runs     []vaScaleRun    `json:"runs"`
	// Fits are by component, with two counts or more.
	Fits map[string]rssFit `json:"rss_fits,omitempty"`
	// FencedRatio is the lost node's fenced detach at the largest count
	// over that at the smallest.
	FencedRatio float64  `json:"vas_fenced_ratio_largest_over_smallest"`
	Table       string   `json:"table"`
	Verdicts    []string `json:"verdicts"`
	Context     string   `json:"context"`
}

// rssFit is a component's resident memory as a straight line through the
// runs: BaseMB plus PerTenThousandMB for every 10,000 VolumeAttachments
// (least squares).
type rssFit struct {
	BaseMB           float64 `json:"base_mb"`
	PerTenThousandMB float64 `json:"per_10000_vas_mb"`
}

// fitLine returns the least-squares line y = a + b*x through the points,
// or NaNs when the xs do not spread.
func fitLine(xs, ys []float64) (a, b float64) {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return math.NaN(), math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return math.NaN(), math.NaN()
	}
	b = (n*sxy - sx*sy) / d
	return (sy - b*sx) / n, b
}

func newVAScaleReport(s vaScaleSettings, runs []vaScaleRun) vaScaleReport {
	r := vaScaleReport{Machine: thisMachine(), Settings: s, Runs: runs, Fits: map[string]rssFit{}, FencedRatio: math.NaN()}
	t := Table{Header: []string{"VAs (nodes)", "attach all", "attach/s", "req/VA attached", "taint -> VAs fenced", "taint -> VAs gone", "req/VA moved",
		"attacher CPU", "RSS", "peak RSS", "Go heap", "live heap", "req/min"}}
	ctxTable := Table{Header: []string{"VAs (nodes)", "controller CPU", "RSS", "peak RSS", "live heap", "req/min", "fence agent CPU", "RSS", "live heap",
		"mock-driver CPU", "kube-apiserver CPU", "RSS", "etcd CPU", "kwok CPU", "nodes Ready", "volumes created", "VAs created"}}
	bySize := slices.Clone(runs)
	slices.SortStableFunc(bySize, func(a, b vaScaleRun) int { return a.VAs - b.VAs })
	for _, run := range bySize {
		size := fmt.Sprintf("%d (%d)", run.VAs, run.Nodes)
		perMoved := "n/a"
		if run.VictimVAs > 0 {
			perMoved = fmt.Sprintf("%.1f", run.Attacher.ReactionRequests/float64(run.VictimVAs))
		}
		a := run.Attacher
		t.AddRow(size, secs(run.Attach), fmt.Sprintf("%.1f", run.AttachRate), fmt.Sprintf("%.2f", run.AttachRequestsPerVA),
			secs(run.VAsFenced), secs(run.VAsGone), perMoved,
			pct(a.CPUPercent), mb(a.RSSMB), mb(a.PeakRSSMB), mb(a.HeapMB), mb(a.HeapLiveMB), fmt.Sprintf("%.0f", a.RequestsPerMin))
		p := run.Processes
		ctxTable.AddRow(size, pct(run.Controller.CPUPercent), mb(run.Controller.RSSMB), mb(run.Controller.PeakRSSMB), mb(run.Controller.HeapLiveMB),
			fmt.Sprintf("%.0f", run.Controller.RequestsPerMin), pct(run.FenceAgent.CPUPercent), mb(run.FenceAgent.RSSMB), mb(run.FenceAgent.HeapLiveMB),
			pct(p["mock-driver"].CPUPercent), pct(p["kube-apiserver"].CPUPercent), mb(p["kube-apiserver"].RSSMB),
			pct(p["etcd"].CPUPercent), pct(p["kwok"].CPUPercent), secs(run.NodesReady), secs(run.VolumesCreated), secs(run.VAsCreated))
	}
	r.Table = t.String()
	r.Context = "The other components and the control plane over the same idle window, and how long the cluster took to build:\n" + ctxTable.String()
	if len(runs) == 0 {
		return r
	}
	small, large := bySize[0], bySize[len(bySize)-1]
	r.FencedRatio = Ratio(large.VAsFenced.Seconds(), small.VAsFenced.Seconds())
	a := large.Attacher
	r.Verdicts = append(r.Verdicts, fmt.Sprintf("attacher at %d VolumeAttachments: RSS %.0f MB, peak %.0f MB, Go heap %.0f MB (live %.0f MB); %s CPU at rest; all attached in %s (%.1f/s at --kube-api-qps=%d)",
		large.VAs, a.RSSMB, a.PeakRSSMB, a.HeapMB, a.HeapLiveMB, pct(a.CPUPercent), secs(large.Attach), large.AttachRate, s.AttacherQPS))
	if len(bySize) == 1 {
		r.Verdicts = append(r.Verdicts, fmt.Sprintf("one count only (%d): no fit, no ratio", small.VAs))
		return r
	}
	xs := make([]float64, len(bySize))
	for i, run := range bySize {
		xs[i] = float64(run.VAs)
	}
	for _, c := range []struct {
		name string
		rss  func(vaScaleRun) float64
	}{
		{"attacher", func(r vaScaleRun) float64 { return r.Attacher.RSSMB }},
		{"controller", func(r vaScaleRun) float64 { return r.Controller.RSSMB }},
		{"fence-agent", func(r vaScaleRun) float64 { return r.FenceAgent.RSSMB }},
	} {
		ys := make([]float64, len(bySize))
		for i, run := range bySize {
			ys[i] = c.rss(run)
		}
		base, slope := fitLine(xs, ys)
		if math.IsNaN(base) {
			continue // every run of one count
		}
		f := rssFit{BaseMB: base, PerTenThousandMB: slope * 10000}
		r.Fits[c.name] = f
		r.Verdicts = append(r.Verdicts, fmt.Sprintf("%s RSS, least squares over %d runs: %.0f MB + %.1f MB per 10,000 VolumeAttachments",
			c.name, len(bySize), f.BaseMB, f.PerTenThousandMB))
	}
	r.Verdicts = append(r.Verdicts, fmt.Sprintf("lost node's fenced detach at %d / at %d VolumeAttachments: %s (%s vs %s)",
		large.VAs, small.VAs, FormatRatio(r.FencedRatio), secs(large.VAsFenced), secs(small.VAsFenced)))
	return r
}
