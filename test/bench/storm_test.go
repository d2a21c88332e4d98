package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// The storm: while a node dies, routine work of other workloads keeps the
// attachers busy (one StatefulSet scaling up, another scaling down).
const (
	// stormFailoverTimeout bounds a failover behind a storm: upstream's
	// attacher works through the storm's writes first, at 5 per second.
	stormFailoverTimeout = 20 * time.Minute
	// stormRepetitionDeadline bounds one repetition with a storm.
	stormRepetitionDeadline = 30 * time.Minute
	stormPrefix             = "storm"
)

// stormConfigs are BenchmarkFailoverStorm's runs: the same failover idle
// and under the storm, for Fenceline with the operator's taint and with
// nobody acting, and upstream under the storm. Idle upstream is
// BenchmarkFailover's.
var stormConfigs = []failoverConfig{
	withStorm(failoverConfigs[0], "U-storm"),
	failoverConfigs[1],
	withStorm(failoverConfigs[1], "F-storm"),
	failoverConfigs[2],
	withStorm(failoverConfigs[2], "F-auto-storm"),
}

func withStorm(cfg failoverConfig, name string) failoverConfig {
	cfg.Name, cfg.Storm = name, true
	return cfg
}

// stormRun is one repetition: the failover's figures and how far the storm
// had got when the failover was done.
type stormRun struct {
	failoverRun
	// StormAttached and StormDetached count the storm's attaches and
	// detaches done when the last replacement was Running and attached.
	StormAttached int `json:"storm_attached_at_failover"`
	StormDetached int `json:"storm_detached_at_failover"`
}

// BenchmarkFailoverStorm measures BenchmarkFailover's failover while
// FENCELINE_BENCH_STORM VolumeAttachments of other volumes are being
// attached and as many detached on the surviving nodes, all of them queued
// at the node's power-off, with both attachers at their default API rate
// (--kube-api-qps 5). The figure is the last replacement Running and
// attached, from the out-of-service taint (U-storm, F, F-storm) or from the
// node's last heartbeat with nobody acting (F-auto, F-auto-storm).
func BenchmarkFailoverStorm(b *testing.B) {
	s := benchSetup(b)
	upstream, err := cluster.Tool(upstreamAttacher)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		runs := map[string][]stormRun{}
		for rep := 1; rep <= s.StormReps; rep++ {
			for _, cfg := range stormConfigs {
				if !s.runs(cfg.Name) {
					continue
				}
				deadline := repetitionDeadline
				if cfg.Storm {
					deadline = stormRepetitionDeadline
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				fr, err := runFailover(ctx, cfg, s, upstream)
				cancel()
				if err != nil {
					b.Fatalf("%s repetition %d: %v", cfg.Name, rep, err)
				}
				run := stormRun{failoverRun: fr, StormAttached: fr.storm.attached, StormDetached: fr.storm.detached}
				run.Rep = rep
				runs[cfg.Name] = append(runs[cfg.Name], run)
				b.Logf("%s rep %d/%d: %d pods moved off %s; replacements attached %.2fs; storm at that moment: %d/%d attached, %d/%d detached (wall %s)",
					cfg.Name, rep, s.StormReps, run.Moved, run.Victim, run.Replacements.Seconds(),
					run.StormAttached, s.Storm, run.StormDetached, s.Storm, time.Since(start).Round(time.Second))
			}
		}
		report := newStormReport(s, runs)
		fmt.Printf("\nFailover under a storm of %d attaches and %d detaches, %d pods over 3 nodes, attachers at --kube-api-qps 5 (median [min–max]); %s\n%s\n",
			s.Storm, s.Storm, s.Pods, report.Machine, report.Table)
		path, err := writeResult(fmt.Sprintf("failover-storm-%d", s.Storm), report)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
		for _, name := range []string{"U-storm", "F", "F-storm"} {
			b.ReportMetric(report.Summaries[name].Median, name+"-taint-to-attached-s")
		}
	}
}

// stormReport is the JSON written to bench-results/.
type stormReport struct {
	Machine   machine               `json:"machine"`
	Settings  settings              `json:"settings"`
	Runs      map[string][]stormRun `json:"runs"`
	Summaries map[string]Summary    `json:"summaries"`
	Table     string                `json:"table"`
}

func newStormReport(s settings, runs map[string][]stormRun) stormReport {
	r := stormReport{Machine: thisMachine(), Settings: s, Runs: runs, Summaries: map[string]Summary{}}
	for name, rs := range runs {
		var d []time.Duration
		for _, run := range rs {
			d = append(d, run.Replacements)
		}
		r.Summaries[name] = Summarize(d)
	}
	t := Table{Header: []string{"failover", "idle", "under the storm", "storm/idle", "storm done at failover"}}
	row := func(label, idle, storm string) {
		i, st := r.Summaries[idle], r.Summaries[storm]
		done := "n/a"
		if rs := runs[storm]; len(rs) > 0 {
			last := rs[len(rs)-1]
			done = fmt.Sprintf("%d/%d attached, %d/%d detached", last.StormAttached, s.Storm, last.StormDetached, s.Storm)
		}
		idleCell := "see BenchmarkFailover"
		ratio := "n/a"
		if i.N > 0 {
			idleCell, ratio = i.String(), FormatRatio(Ratio(st.Median, i.Median))
		}
		t.AddRow(label, idleCell, st.String(), ratio, done)
	}
	row("U: taint -> last replacement Running + attached", "U", "U-storm")
	row("F: taint -> last replacement Running + attached", "F", "F-storm")
	row("F-auto: heartbeat -> last replacement Running + attached, no human", "F-auto", "F-auto-storm")
	if u, f := r.Summaries["U-storm"], r.Summaries["F-storm"]; u.N > 0 && f.N > 0 {
		t.AddRow("under the storm, U/F", "", FormatRatio(Ratio(u.Median, f.Median)), "", "")
	}
	r.Table = t.String()
	return r
}

// storm is the routine work of other workloads: n volumes attached to the
// surviving nodes to be detached, and n more to be attached there.
type storm struct {
	cs       kubernetes.Interface
	n        int
	detaches []string // VolumeAttachments to delete
	attaches []*storagev1.VolumeAttachment
}

// stormProgress is how much of a storm was done when the failover was.
type stormProgress struct {
	attached, detached int
}

func stormPV(i int) string { return fmt.Sprintf("%s-pv-%d", stormPrefix, i) }
func stormVA(i int) string { return fmt.Sprintf("%s-va-%d", stormPrefix, i) }

// prepareStorm creates 2n volumes on the array and their PersistentVolumes,
// publishes the first n to the surviving nodes on the array and records
// them attached (as an attacher would have), all through the admin client
// and the driver's socket so that the attachers start the storm idle.
func prepareStorm(ctx context.Context, w *world.World, victim string, n int) (*storm, error) {
	cs := w.Cluster.Client()
	nodeIDs := map[string]string{}
	for _, node := range w.Nodes {
		if node == victim {
			continue
		}
		id, err := csiNodeID(ctx, cs, node)
		if err != nil {
			return nil, err
		}
		nodeIDs[node] = id
	}
	nodes := slices.Sorted(maps.Keys(nodeIDs))
	conn, err := grpc.NewClient(w.ControllerSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connecting to the driver: %w", err)
	}
	defer conn.Close()
	ctrl := csi.NewControllerClient(conn)
	st := &storm{cs: cs, n: n}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for i := range 2 * n {
		node := nodes[i%len(nodes)]
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: stormVA(i)},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: world.DriverName, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(stormPV(i))}},
		}
		if i < n {
			st.detaches = append(st.detaches, va.Name)
		} else {
			st.attaches = append(st.attaches, va)
		}
		g.Go(func() error {
			handle, err := stormVolume(gctx, ctrl, cs, i)
			if err != nil {
				return err
			}
			if i >= n {
				return nil
			}
			return attachedVA(gctx, ctrl, cs, va, handle, nodeIDs[node])
		})
	}
	return st, g.Wait()
}

// stormVolume creates volume i on the array and its PersistentVolume.
func stormVolume(ctx context.Context, ctrl csi.ControllerClient, cs kubernetes.Interface, i int) (string, error) {
	resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               fmt.Sprintf("%s-%d", stormPrefix, i),
		CapacityRange:      &csi.CapacityRange{RequiredBytes: world.VolumeSize},
		VolumeCapabilities: []*csi.VolumeCapability{stormCapability()},
	})
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s-%d: %w", stormPrefix, i, err)
	}
	handle := resp.GetVolume().GetVolumeId()
	pv := csiPV(stormPV(i), handle)
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PV %s: %w", pv.Name, err)
	}
	return handle, nil
}

func stormCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// attachedVA publishes the volume on the array and creates va as an
// attacher leaves it after a successful attach: its finalizer and
// status.attached.
func attachedVA(ctx context.Context, ctrl csi.ControllerClient, cs kubernetes.Interface, va *storagev1.VolumeAttachment, handle, nodeID string) error {
	resp, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: handle, NodeId: nodeID, VolumeCapability: stormCapability(),
	})
	if err != nil {
		return fmt.Errorf("ControllerPublishVolume %s to %s: %w", handle, nodeID, err)
	}
	va = va.DeepCopy()
	va.Finalizers = []string{names.AttacherFinalizer(world.DriverName)}
	out, err := cs.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating VolumeAttachment %s: %w", va.Name, err)
	}
	out.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: resp.GetPublishContext()}
	if _, err := cs.StorageV1().VolumeAttachments().UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking VolumeAttachment %s attached: %w", va.Name, err)
	}
	return nil
}

func csiNodeID(ctx context.Context, cs kubernetes.Interface, node string) (string, error) {
	n, err := cs.StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting the CSINode of %s: %w", node, err)
	}
	for _, d := range n.Spec.Drivers {
		if d.Name == world.DriverName {
			return d.NodeID, nil
		}
	}
	return "", fmt.Errorf("CSINode %s has no entry for %s", node, world.DriverName)
}

// start queues the whole storm at once: every detach (a deletion) and every
// attach (a creation), as the attach/detach controller would when two
// StatefulSets scale.
func (st *storm) start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clientParallelism)
	for i := range st.n {
		g.Go(func() error {
			if err := st.cs.StorageV1().VolumeAttachments().Delete(gctx, st.detaches[i], metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting VolumeAttachment %s: %w", st.detaches[i], err)
			}
			if _, err := st.cs.StorageV1().VolumeAttachments().Create(gctx, st.attaches[i], metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating VolumeAttachment %s: %w", st.attaches[i].Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// progress tells how much of the storm the recorder has seen done.
func (st *storm) progress(rec *recorder) stormProgress {
	var p stormProgress
	for _, va := range st.attaches {
		if obj, ok, _ := rec.vas.GetByKey(va.Name); ok && obj.(*storagev1.VolumeAttachment).Status.Attached {
			p.attached++
		}
	}
	for _, name := range st.detaches {
		if _, ok, _ := rec.vas.GetByKey(name); !ok {
			p.detached++
		}
	}
	return p
}
