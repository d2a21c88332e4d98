package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	mockdriver "fenceline.io/fenceline/mock-driver/driver"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/rbaccheck"
	"fenceline.io/fenceline/test/world"
)

const (
	// throughputNodes is how many nodes the VolumeAttachments spread over.
	throughputNodes = 5
	// attacherNamespace and attacherSA are the identity both attachers run
	// with, so that the API server's audit log attributes their requests.
	attacherNamespace = "bench-system"
	attacherSA        = "bench-attacher"
	// phaseTimeoutPerVA bounds one phase; generous for 5 QPS.
	phaseTimeoutPerVA = time.Second
	clientParallelism = 16
)

// throughputRun is one attacher at one driver latency.
type throughputRun struct {
	Attacher  string        `json:"attacher"`
	Latency   time.Duration `json:"driver_latency_ns"`
	VAs       int           `json:"vas"`
	AttachS   float64       `json:"attach_s"`
	DetachS   float64       `json:"detach_s"`
	AttachOps float64       `json:"attach_ops_per_s"`
	DetachOps float64       `json:"detach_ops_per_s"`
	// Requests per VolumeAttachment, from kube-apiserver's audit log of the
	// attacher's identity: all requests and writes (create, update, patch,
	// delete), for the attach and the detach phase.
	AttachRequestsPerVA float64        `json:"attach_requests_per_va"`
	AttachWritesPerVA   float64        `json:"attach_writes_per_va"`
	DetachRequestsPerVA float64        `json:"detach_requests_per_va"`
	DetachWritesPerVA   float64        `json:"detach_writes_per_va"`
	AttachCalls         map[string]int `json:"attach_calls"`
	DetachCalls         map[string]int `json:"detach_calls"`
	// CSI calls per VolumeAttachment the driver received (its audit log,
	// the warm-up left out): every ControllerPublishVolume of the attach
	// phase and ControllerUnpublishVolume of the detach phase, and the
	// successful ones (external-attacher #587: a second unpublish).
	PublishesPerVA     float64 `json:"publishes_per_va"`
	OKPublishesPerVA   float64 `json:"ok_publishes_per_va"`
	UnpublishesPerVA   float64 `json:"unpublishes_per_va"`
	OKUnpublishesPerVA float64 `json:"ok_unpublishes_per_va"`
}

// BenchmarkAttachThroughput attaches and then detaches FENCELINE_BENCH_VAS
// VolumeAttachments with fenceline-attacher and with upstream
// external-attacher, at the same worker threads and API rate limits, with
// the mock driver answering at once and after a fixed latency. Only etcd,
// kube-apiserver, the mock driver and the attacher run: the benchmark
// creates the Nodes, CSINodes, PVs and VolumeAttachments itself, as the
// attach/detach controller would.
func BenchmarkAttachThroughput(b *testing.B) {
	s := benchSetup(b)
	upstream, err := cluster.Tool(upstreamAttacher)
	if err != nil {
		b.Fatal(err)
	}
	ours, err := cluster.Binary("fenceline-attacher")
	if err != nil {
		b.Fatal(err)
	}
	attachers := []struct{ name, path string }{{"upstream", upstream}, {"fenceline", ours}}
	for range b.N {
		var runs []throughputRun
		for _, lat := range []time.Duration{0, s.Latency} {
			for _, a := range attachers {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+4*time.Duration(s.VAs)*phaseTimeoutPerVA)
				run, err := runThroughput(ctx, s, a.name, a.path, lat)
				cancel()
				if err != nil {
					b.Fatalf("%s at %s latency: %v", a.name, lat, err)
				}
				b.Logf("%s, driver latency %s: attach %.1f/s, detach %.1f/s, %.2f requests (%.2f writes) per attach, %.2f (%.2f) per detach",
					a.name, lat, run.AttachOps, run.DetachOps, run.AttachRequestsPerVA, run.AttachWritesPerVA, run.DetachRequestsPerVA, run.DetachWritesPerVA)
				runs = append(runs, run)
			}
		}
		report := newThroughputReport(s, runs)
		fmt.Printf("\nAttach/detach throughput, %d VolumeAttachments, --worker-threads=%d --kube-api-qps=%d --kube-api-burst=%d; %s\n%s\n",
			s.VAs, s.Workers, s.QPS, s.Burst, report.Machine, report.Table)
		path, err := writeResult(fmt.Sprintf("throughput-%dvas", s.VAs), report)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
		for _, r := range runs {
			b.ReportMetric(r.AttachOps, fmt.Sprintf("%s-%dms-attach/s", r.Attacher, r.Latency.Milliseconds()))
		}
	}
}

// throughputReport is the JSON written to bench-results/.
type throughputReport struct {
	Machine machine         `json:"machine"`
	Setting settings        `json:"settings"`
	Runs    []throughputRun `json:"runs"`
	Table   string          `json:"table"`
}

func newThroughputReport(s settings, runs []throughputRun) throughputReport {
	r := throughputReport{Machine: thisMachine(), Setting: s, Runs: runs}
	t := Table{Header: []string{"driver latency", "attacher", "attach/s", "detach/s", "API requests/attach", "API writes/attach", "API requests/detach", "API writes/detach", "publishes/attach (OK)", "unpublishes/detach (OK)"}}
	byLatency := map[time.Duration]map[string]throughputRun{}
	var order []time.Duration
	for _, run := range runs {
		if byLatency[run.Latency] == nil {
			byLatency[run.Latency] = map[string]throughputRun{}
			order = append(order, run.Latency)
		}
		byLatency[run.Latency][run.Attacher] = run
		t.AddRow(run.Latency.String(), run.Attacher, fmt.Sprintf("%.1f", run.AttachOps), fmt.Sprintf("%.1f", run.DetachOps),
			fmt.Sprintf("%.2f", run.AttachRequestsPerVA), fmt.Sprintf("%.2f", run.AttachWritesPerVA),
			fmt.Sprintf("%.2f", run.DetachRequestsPerVA), fmt.Sprintf("%.2f", run.DetachWritesPerVA),
			fmt.Sprintf("%.2f (%.2f)", run.PublishesPerVA, run.OKPublishesPerVA), fmt.Sprintf("%.2f (%.2f)", run.UnpublishesPerVA, run.OKUnpublishesPerVA))
	}
	for _, lat := range order {
		u, f := byLatency[lat]["upstream"], byLatency[lat]["fenceline"]
		t.AddRow(lat.String(), "fenceline/upstream",
			FormatRatio(Ratio(f.AttachOps, u.AttachOps)), FormatRatio(Ratio(f.DetachOps, u.DetachOps)),
			FormatRatio(Ratio(f.AttachRequestsPerVA, u.AttachRequestsPerVA)), FormatRatio(Ratio(f.AttachWritesPerVA, u.AttachWritesPerVA)),
			FormatRatio(Ratio(f.DetachRequestsPerVA, u.DetachRequestsPerVA)), FormatRatio(Ratio(f.DetachWritesPerVA, u.DetachWritesPerVA)),
			FormatRatio(Ratio(f.PublishesPerVA, u.PublishesPerVA)), FormatRatio(Ratio(f.UnpublishesPerVA, u.UnpublishesPerVA)))
	}
	r.Table = t.String()
	return r
}

// runThroughput measures one attacher at one latency on a fresh control
// plane, so that nothing left by another run (finalizers, informer caches)
// weighs on it.
func runThroughput(ctx context.Context, s settings, name, attacherPath string, latency time.Duration) (throughputRun, error) {
	run := throughputRun{Attacher: name, Latency: latency, VAs: s.VAs}
	err := withCluster(ctx, "bench-throughput-"+name, cluster.Options{AuditLog: true}, func(c *cluster.Cluster) error {
		cs, err := fastClient(c)
		if err != nil {
			return err
		}
		nodes, err := createNodes(ctx, cs)
		if err != nil {
			return err
		}
		driver, err := startDriver(ctx, c, nodes, latency)
		if err != nil {
			return err
		}
		defer driver.Stop(5 * time.Second)
		handles, err := createVolumes(ctx, c, s.VAs+1)
		if err != nil {
			return err
		}
		if err := createPVs(ctx, cs, handles); err != nil {
			return err
		}
		vas, err := watchVAs(ctx, cs)
		if err != nil {
			return err
		}
		user, kubeconfig, err := attacherIdentity(ctx, c, cs)
		if err != nil {
			return err
		}
		p, err := cluster.StartProcess(filepath.Base(attacherPath), c.LogDir(), attacherPath,
			"--kubeconfig="+kubeconfig,
			"--csi-address="+driverEndpoint(c),
			"--worker-threads="+strconv.Itoa(s.Workers),
			"--kube-api-qps="+strconv.Itoa(s.QPS),
			"--kube-api-burst="+strconv.Itoa(s.Burst),
			"--timeout=15s",
			"--v=2",
		)
		if err != nil {
			return err
		}
		c.Track(p)
		defer p.Stop(5 * time.Second)

		// One VolumeAttachment first, so that the attacher's start-up
		// (connecting to the driver, listing and watching) is not counted.
		if err := createVAs(ctx, cs, nodes, handles[:1], 0); err != nil {
			return err
		}
		if err := vas.waitAttached(ctx, p, 1, 2*time.Minute); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		before, err := callsOf(c, user)
		if err != nil {
			return err
		}
		phase := time.Duration(s.VAs) * phaseTimeoutPerVA
		start := time.Now()
		if err := createVAs(ctx, cs, nodes, handles[1:], 1); err != nil {
			return err
		}
		if err := vas.waitAttached(ctx, p, s.VAs+1, time.Minute+phase); err != nil {
			return err
		}
		run.AttachS = vas.lastAttached().Sub(start).Seconds()
		attached, err := callsOf(c, user)
		if err != nil {
			return err
		}
		start = time.Now()
		if err := deleteVAs(ctx, cs, s.VAs, 1); err != nil {
			return err
		}
		if err := vas.waitDeleted(ctx, p, s.VAs, time.Minute+phase); err != nil {
			return err
		}
		run.DetachS = vas.lastDeleted().Sub(start).Seconds()
		detached, err := callsOf(c, user)
		if err != nil {
			return err
		}
		n := float64(s.VAs)
		run.AttachOps, run.DetachOps = n/run.AttachS, n/run.DetachS
		attach, detach := attached[len(before):], detached[len(attached):]
		run.AttachCalls, run.DetachCalls = tally(attach), tally(detach)
		run.AttachRequestsPerVA, run.AttachWritesPerVA = float64(len(attach))/n, float64(writes(attach))/n
		run.DetachRequestsPerVA, run.DetachWritesPerVA = float64(len(detach))/n, float64(writes(detach))/n
		recs, err := audit.ReadFile(filepath.Join(c.Dir(), "mock", mockdriver.AuditFile))
		if err != nil {
			return err
		}
		// The warm-up VolumeAttachment is never detached; its publish is
		// the first one.
		publishes := audit.Filter(recs, audit.Method("ControllerPublishVolume"), func(r audit.Record) bool { return r.VolumeID != handles[0] })
		unpublishes := audit.Filter(recs, audit.Method("ControllerUnpublishVolume"))
		run.PublishesPerVA, run.OKPublishesPerVA = float64(len(publishes))/n, float64(len(audit.Filter(publishes, audit.OK())))/n
		run.UnpublishesPerVA, run.OKUnpublishesPerVA = float64(len(unpublishes))/n, float64(len(audit.Filter(unpublishes, audit.OK())))/n
		return nil
	})
	return run, err
}

// fastClient is a cluster-admin client whose own rate limits do not pace
// the benchmark's creates and deletes.
func fastClient(c *cluster.Cluster) (kubernetes.Interface, error) {
	cfg := c.AdminConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a client: %w", err)
	}
	return cs, nil
}

// createNodes creates Ready nodes and their CSINodes, as kubelets with the
// driver registered would have. No controller-manager runs, so they stay
// Ready: the attachers must see healthy nodes, not lost ones.
func createNodes(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	var nodes []string
	for i := range throughputNodes {
		name := fmt.Sprintf("node-%d", i)
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating node %s: %w", name, err)
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("marking node %s Ready: %w", name, err)
		}
		csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: world.DriverName, NodeID: name}}}}
		if _, err := cs.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating CSINode %s: %w", name, err)
		}
		nodes = append(nodes, name)
	}
	attach := true
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: world.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &attach}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating CSIDriver: %w", err)
	}
	return nodes, nil
}

func driverEndpoint(c *cluster.Cluster) string {
	return "unix://" + filepath.Join(c.Dir(), "driver.sock")
}

// startDriver runs the mock driver with a node socket per node (the array
// only attaches to nodes it knows) and, when latency is set, that delay on
// every controller publish and unpublish.
func startDriver(ctx context.Context, c *cluster.Cluster, nodes []string, latency time.Duration) (*cluster.Process, error) {
	bin, err := cluster.Binary("mock-driver")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--endpoint=" + driverEndpoint(c),
		"--state-dir=" + filepath.Join(c.Dir(), "mock"),
		"--name=" + world.DriverName,
		"--v=1",
	}
	for _, n := range nodes {
		args = append(args, "--node-endpoint="+n+"=unix://"+filepath.Join(c.Dir(), n+".sock"))
	}
	if latency > 0 {
		args = append(args, "--latency=ControllerPublishVolume:"+latency.String(), "--latency=ControllerUnpublishVolume:"+latency.String())
	}
	p, err := cluster.StartProcess("mock-driver", c.LogDir(), bin, args...)
	if err != nil {
		return nil, err
	}
	c.Track(p)
	if err := world.WaitDriverReady(ctx, p, driverEndpoint(c)); err != nil {
		return p, fmt.Errorf("waiting for the mock driver: %w", err)
	}
	return p, nil
}

// createVolumes creates n volumes on the mock array and returns their handles.
func createVolumes(ctx context.Context, c *cluster.Cluster, n int) ([]string, error) {
	conn, err := grpc.NewClient(driverEndpoint(c), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the driver: %w", err)
	}
	defer conn.Close()
	ctrl := csi.NewControllerClient(conn)
	handles := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for i := range n {
		g.Go(func() error {
			resp, err := ctrl.CreateVolume(gctx, &csi.CreateVolumeRequest{
				Name:          fmt.Sprintf("tp-%d", i),
				CapacityRange: &csi.CapacityRange{RequiredBytes: world.VolumeSize},
				VolumeCapabilities: []*csi.VolumeCapability{{
					AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
					AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				}},
			})
			if err != nil {
				return fmt.Errorf("CreateVolume tp-%d: %w", i, err)
			}
			handles[i] = resp.GetVolume().GetVolumeId()
			return nil
		})
	}
	return handles, g.Wait()
}

func pvName(i int) string { return fmt.Sprintf("pv-tp-%d", i) }
func vaName(i int) string { return fmt.Sprintf("va-tp-%d", i) }

// createPVs creates one bound-looking CSI PersistentVolume per handle.
func createPVs(ctx context.Context, cs kubernetes.Interface, handles []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for i, h := range handles {
		g.Go(func() error {
			pv := csiPV(pvName(i), h)
			if _, err := cs.CoreV1().PersistentVolumes().Create(gctx, pv, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating PV %s: %w", pv.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// csiPV is a bound-looking CSI PersistentVolume of the mock driver's
// volume handle, as a provisioner would have created it.
func csiPV(name, handle string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(world.VolumeSize, resource.BinarySI)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: world.DriverName, VolumeHandle: handle, FSType: "ext4",
			}},
		},
	}
}

// createVAs creates a VolumeAttachment per handle (numbered from first),
// round-robin over nodes, as the attach/detach controller would.
func createVAs(ctx context.Context, cs kubernetes.Interface, nodes, handles []string, first int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for j := range handles {
		i := first + j
		g.Go(func() error {
			va := &storagev1.VolumeAttachment{
				ObjectMeta: metav1.ObjectMeta{Name: vaName(i)},
				Spec: storagev1.VolumeAttachmentSpec{
					Attacher: world.DriverName,
					NodeName: nodes[i%len(nodes)],
					Source:   storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pvName(i))},
				},
			}
			if _, err := cs.StorageV1().VolumeAttachments().Create(gctx, va, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating VolumeAttachment %s: %w", va.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// deleteVAs deletes n VolumeAttachments numbered from first.
func deleteVAs(ctx context.Context, cs kubernetes.Interface, n, first int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for j := range n {
		name := vaName(first + j)
		g.Go(func() error {
			if err := cs.StorageV1().VolumeAttachments().Delete(gctx, name, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting VolumeAttachment %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// vaCounter counts VolumeAttachments seen attached and deleted, with the
// time of the latest of each, as watch events arrive.
type vaCounter struct {
	attached, deleted atomic.Int64
	mu                sync.Mutex
	seen              map[string]bool
	lastAtt, lastDel  time.Time
}

func watchVAs(ctx context.Context, cs kubernetes.Interface) (*vaCounter, error) {
	v := &vaCounter{seen: map[string]bool{}}
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Storage().V1().VolumeAttachments().Informer()
	onUpdate := func(obj any) {
		va, ok := obj.(*storagev1.VolumeAttachment)
		if !ok || !va.Status.Attached {
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if !v.seen[va.Name] {
			v.seen[va.Name] = true
			v.lastAtt = time.Now()
			v.attached.Add(1)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onUpdate,
		UpdateFunc: func(_, obj any) { onUpdate(obj) },
		DeleteFunc: func(any) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.lastDel = time.Now()
			v.deleted.Add(1)
		},
	}); err != nil {
		return nil, fmt.Errorf("watching VolumeAttachments: %w", err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	return v, nil
}

func (v *vaCounter) lastAttached() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastAtt
}

func (v *vaCounter) lastDeleted() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastDel
}

func (v *vaCounter) waitAttached(ctx context.Context, attacher *cluster.Process, n int, timeout time.Duration) error {
	return v.wait(ctx, attacher, timeout, fmt.Sprintf("%d VolumeAttachments attached", n), func() bool { return v.attached.Load() >= int64(n) })
}

func (v *vaCounter) waitDeleted(ctx context.Context, attacher *cluster.Process, n int, timeout time.Duration) error {
	return v.wait(ctx, attacher, timeout, fmt.Sprintf("%d VolumeAttachments detached and deleted", n), func() bool { return v.deleted.Load() >= int64(n) })
}

func (v *vaCounter) wait(ctx context.Context, attacher *cluster.Process, timeout time.Duration, what string, done func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if exited, err := attacher.Exited(); exited {
			return false, fmt.Errorf("%s exited (%v); see %s", attacher.Name, err, attacher.LogPath)
		}
		return done(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s (attached %d, deleted %d so far): %w", what, v.attached.Load(), v.deleted.Load(), err)
	}
	return nil
}

// attacherIdentity creates the ServiceAccount both attachers run as, with
// the rules upstream external-attacher documents plus what
// fenceline-attacher reads in addition (Nodes, CSIDrivers) and writes
// (Events), and returns its user name and a kubeconfig.
func attacherIdentity(ctx context.Context, c *cluster.Cluster, cs kubernetes.Interface) (string, string, error) {
	_, kubeconfig, err := c.ServiceAccountKubeconfig(ctx, attacherNamespace, attacherSA)
	if err != nil {
		return "", "", err
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: attacherSA},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes", "csidrivers"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return "", "", fmt.Errorf("creating ClusterRole: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: attacherSA},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: attacherSA},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: attacherNamespace, Name: attacherSA}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", "", fmt.Errorf("creating ClusterRoleBinding: %w", err)
	}
	return "system:serviceaccount:" + attacherNamespace + ":" + attacherSA, kubeconfig, nil
}

// callsOf returns the requests user made so far, from the audit log.
func callsOf(c *cluster.Cluster, user string) ([]rbaccheck.Call, error) {
	all, err := rbaccheck.ReadAuditLog(c.AuditLogPath())
	if err != nil {
		return nil, fmt.Errorf("reading the API server's audit log: %w", err)
	}
	var out []rbaccheck.Call
	for _, call := range all {
		if call.User == user {
			out = append(out, call)
		}
	}
	return out, nil
}

// tally counts calls by "verb resource[/subresource]".
func tally(calls []rbaccheck.Call) map[string]int {
	out := map[string]int{}
	for _, c := range calls {
		key := c.Verb + " " + c.Resource
		if c.Subresource != "" {
			key += "/" + c.Subresource
		}
		if !c.IsResource() {
			key = c.Verb + " " + c.Path
		}
		out[key]++
	}
	return out
}

// writes counts the calls that change state.
func writes(calls []rbaccheck.Call) int {
	n := 0
	for _, c := range calls {
		switch c.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			n++
		}
	}
	return n
}
