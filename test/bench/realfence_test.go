package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/iscsi"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// fenceBackend is one row of the fence-cost benchmark: where the volume
// lives and how a fence cuts the node off there.
type fenceBackend struct {
	Name   string
	driver world.DriverOptions
	real   bool
}

var fenceBackends = []fenceBackend{
	{Name: "memory (mock array)"},
	{Name: "tgt, acl+sessions", driver: world.TgtDriver(tgt.MethodACLSessions, world.DriverOptions{}), real: true},
	{Name: "tgt, pr", driver: world.TgtDriver(tgt.MethodPR, world.DriverOptions{}), real: true},
}

// fenceCostRun is one repetition's figures.
type fenceCostRun struct {
	Backend string `json:"backend"`
	// TaintToFence is from the out-of-service taint to the fenced
	// ControllerUnpublishVolume returning OK (the driver's record).
	TaintToFence time.Duration `json:"taint_to_fence_ns"`
	// FenceToWrite is from there to the new node's first acknowledged
	// write to the volume.
	FenceToWrite time.Duration `json:"fence_to_first_write_ns"`
}

// fenceCostWriteInterval is the stand-ins' write period here: short, since
// the first write after the move is what is measured.
const fenceCostWriteInterval = 20 * time.Millisecond

// BenchmarkFenceCost measures what a real fence costs beside the mock
// array's: one pod's node loses power while its session keeps writing, the
// operator applies the out-of-service taint, and the benchmark times the
// fenced unpublish and the new node's first acknowledged write, on the
// memory backend and on a real iSCSI target (tgt) with each fence method.
// The tgt rows need root and Debian's tgt; without them they are left out
// and the log says why.
func BenchmarkFenceCost(b *testing.B) {
	s := benchSetup(b)
	backends := fenceBackends
	if err := iscsi.TgtUsable(); err != nil {
		b.Logf("tgt rows left out: %v", err)
		backends = backends[:1]
	}
	for range b.N {
		runs := map[string][]fenceCostRun{}
		for rep := 1; rep <= s.Reps; rep++ {
			for _, be := range backends {
				ctx, cancel := context.WithTimeout(context.Background(), repetitionDeadline)
				run, err := runFenceCost(ctx, be)
				cancel()
				if err != nil {
					b.Fatalf("%s repetition %d: %v", be.Name, rep, err)
				}
				runs[be.Name] = append(runs[be.Name], run)
				b.Logf("%s rep %d/%d: taint -> fence %.3fs, fence -> first write of the new node %.3fs",
					be.Name, rep, s.Reps, run.TaintToFence.Seconds(), run.FenceToWrite.Seconds())
			}
		}
		t := Table{Header: []string{"backend", "taint -> fenced unpublish returned", "fence -> new node's first acknowledged write"}}
		for _, be := range backends {
			var fence, write []time.Duration
			for _, r := range runs[be.Name] {
				fence, write = append(fence, r.TaintToFence), append(write, r.FenceToWrite)
			}
			t.AddRow(be.Name, Summarize(fence).String(), Summarize(write).String())
		}
		fmt.Printf("\nFence cost, one pod, %d repetitions (median [min–max]); stand-ins write every %s; %s\n%s\n",
			s.Reps, fenceCostWriteInterval, thisMachine(), t.String())
		path, err := writeResult("fence-cost", map[string]any{"machine": thisMachine(), "runs": runs, "table": t.String()})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s", path)
	}
}

// runFenceCost runs one repetition on a fresh cluster.
func runFenceCost(ctx context.Context, be fenceBackend) (fenceCostRun, error) {
	run := fenceCostRun{Backend: be.Name}
	err := withCluster(ctx, "bench-fence-cost", cluster.Options{ControllerManager: true, Scheduler: true, KWOK: true}, func(c *cluster.Cluster) error {
		w, err := world.Launch(ctx, c, world.Options{Driver: be.driver, ZombieWrites: true, WriteInterval: fenceCostWriteInterval})
		if w != nil {
			defer w.Stop()
		}
		if err != nil {
			return fmt.Errorf("starting the product: %w", err)
		}
		return fenceCost(ctx, w, be, &run)
	})
	return run, err
}

// fenceCost moves one pod off a powered-off node with the operator's taint
// and records the figures into run.
func fenceCost(ctx context.Context, w *world.World, be fenceBackend, run *fenceCostRun) error {
	cs := w.Cluster.Client()
	if err := w.CreateNamespace(ctx, benchNamespace); err != nil {
		return err
	}
	if err := w.CreateStorageClass(ctx); err != nil {
		return err
	}
	handles, err := w.ProvisionStatefulSet(ctx, benchNamespace, statefulSetName, 1)
	if err != nil {
		return err
	}
	if _, err := cs.AppsV1().StatefulSets(benchNamespace).Create(ctx, world.StatefulSet(benchNamespace, statefulSetName, 1), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the StatefulSet: %w", err)
	}
	pod, err := w.WaitRunning(ctx, benchNamespace, statefulSetName+"-0", "", time.Minute)
	if err != nil {
		return err
	}
	node := pod.Spec.NodeName
	if err := w.PowerOff(ctx, node); err != nil {
		return err
	}
	if err := w.Cluster.WaitNodeReady(ctx, node, corev1.ConditionUnknown, nodeLostTimeout); err != nil {
		return err
	}
	taint := time.Now()
	if err := w.AddTaint(ctx, node, world.OutOfServiceTaint); err != nil {
		return err
	}
	moved, err := w.WaitRunning(ctx, benchNamespace, statefulSetName+"-0", node, failoverTimeout)
	if err != nil {
		return err
	}
	var fence, write time.Time
	if err := world.WaitFor(ctx, failoverTimeout, "the new node's first acknowledged write", func(context.Context) (bool, error) {
		recs, err := w.Audit()
		if err != nil {
			return false, err
		}
		i := audit.FirstIndex(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(handles[0]), audit.Node(node), audit.Fenced(), audit.OK())
		if i < 0 {
			return false, nil
		}
		fence = recs[i].Time
		write = firstAcked(w.Kubelets[moved.Spec.NodeName].Writes(), handles[0], fence)
		return !write.IsZero(), nil
	}); err != nil {
		return err
	}
	run.TaintToFence, run.FenceToWrite = fence.Sub(taint), write.Sub(fence)
	if be.real {
		vs, err := w.CheckBytes(ctx)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if len(v.Violations) > 0 {
				return fmt.Errorf("two writers on the bytes of %s: %v", v.Volume, v.Violations)
			}
		}
	}
	return nil
}

// firstAcked is when the first write to volume sent after t was
// acknowledged; zero if none yet.
func firstAcked(writes []kubelet.Write, volume string, t time.Time) time.Time {
	for _, wr := range writes {
		if wr.VolumeID == volume && wr.Err == nil && wr.Sent.After(t) {
			return wr.Time
		}
	}
	return time.Time{}
}
