package realkubelet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/test/world"
)

// TestStandInMatchesRealKubelet is the differential test of the kubelet
// stand-in: one StatefulSet pod on a stand-in node and one on a real-kubelet
// node go through the same life (attach, start, delete, detach), and the
// two nodes must show the same sequence of CSI node calls (with their force
// fields) and the same history of the volume in volumesInUse relative to
// those calls and to the detach.
//
// One difference is measured and left out of the comparison: when the
// volume first appears in volumesInUse relative to the attach. Both report
// it as soon as the pod needs it, the stand-in at once and the kubelet at
// its next status update (every second here), so it lands before or after
// the ControllerPublishVolume by timing alone; either way it precedes the
// staging (both wait for the report before they stage), which is what the
// attach/detach controller relies on. Its place is therefore not taken
// from this process's watch, which may see it late on a loaded machine:
// the entry heads the sequence when it was seen. Its exit is judged in
// order: it can only be seen after the unstage that caused it. The
// workload's writes depend on timing too and are left out.
func TestStandInMatchesRealKubelet(t *testing.T) {
	const standIn, real = "node-a", "real-a"
	ctx, w := startWorld(t, world.Options{Nodes: []string{standIn}, RealKubelets: []string{real}})
	hist := watchVolumesInUse(ctx, t, w)
	handles := map[string]string{}
	for _, node := range []string{standIn, real} {
		handles[node] = createOn(ctx, t, w, "db-"+node, node)
	}
	for _, node := range []string{standIn, real} {
		_, err := w.WaitRunning(ctx, ns, "db-"+node+"-0", "", 2*time.Minute)
		must(t, err)
	}
	for _, node := range []string{standIn, real} {
		scaleToZero(ctx, t, w, "db-"+node)
	}
	for node, h := range handles {
		waitDetached(ctx, t, w, node, h)
	}
	recs, err := w.Audit()
	must(t, err)
	seqs := map[string][]string{}
	for node, h := range handles {
		seqs[node] = lifeOf(recs, hist.of(node, nodeutil.CSIUniqueVolumeName(world.DriverName, h)), node, h)
	}
	t.Logf("stand-in: %v", seqs[standIn])
	t.Logf("real kubelet: %v", seqs[real])
	if !slices.Equal(seqs[standIn], seqs[real]) {
		t.Fatalf("the stand-in's volume life differs from the real kubelet's:\n stand-in:     %v\n real kubelet: %v", seqs[standIn], seqs[real])
	}
}

// lifeOf merges a node's successful CSI calls on a volume (but the
// attach and the writes, see above) and the volume's exits from the
// node's volumesInUse, in time order, into one sequence of steps, headed
// by its entries.
func lifeOf(recs []audit.Record, inUse []inUseChange, node, handle string) []string {
	type step struct {
		at   time.Time
		what string
	}
	var steps []step
	for _, r := range audit.Filter(recs, audit.Node(node), audit.Volume(handle), audit.OK()) {
		if r.Method == "Write" || r.Method == "ControllerPublishVolume" {
			continue
		}
		what := r.Method
		if r.Force {
			what += "(force)"
		}
		steps = append(steps, step{r.Time, what})
	}
	entered := 0
	for _, c := range inUse {
		if c.in {
			entered++
			continue
		}
		steps = append(steps, step{c.at, "volumesInUse-"})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
	out := make([]string, 0, len(steps)+entered)
	for range entered {
		out = append(out, "volumesInUse+")
	}
	for _, s := range steps {
		out = append(out, s.what)
	}
	return out
}

// inUseChange is a volume entering (in) or leaving a node's volumesInUse,
// when this process saw it.
type inUseChange struct {
	at time.Time
	in bool
}

type inUseHistory struct {
	mu   sync.Mutex
	last map[string][]corev1.UniqueVolumeName
	seen map[string][]volumeChange
}

type volumeChange struct {
	volume corev1.UniqueVolumeName
	inUseChange
}

// of returns the changes of one volume on node.
func (h *inUseHistory) of(node string, volume corev1.UniqueVolumeName) []inUseChange {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []inUseChange
	for _, c := range h.seen[node] {
		if c.volume == volume {
			out = append(out, c.inUseChange)
		}
	}
	return out
}

// watchVolumesInUse records every change of every node's volumesInUse
// until ctx ends.
func watchVolumesInUse(ctx context.Context, t *testing.T, w *world.World) *inUseHistory {
	t.Helper()
	h := &inUseHistory{last: map[string][]corev1.UniqueVolumeName{}, seen: map[string][]volumeChange{}}
	wi, err := w.Cluster.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(fmt.Errorf("watching nodes: %w", err))
	}
	t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			h.mu.Lock()
			before, after := h.last[n.Name], n.Status.VolumesInUse
			for _, v := range after {
				if !slices.Contains(before, v) {
					h.seen[n.Name] = append(h.seen[n.Name], volumeChange{v, inUseChange{now, true}})
				}
			}
			for _, v := range before {
				if !slices.Contains(after, v) {
					h.seen[n.Name] = append(h.seen[n.Name], volumeChange{v, inUseChange{now, false}})
				}
			}
			h.last[n.Name] = slices.Clone(after)
			h.mu.Unlock()
		}
	}()
	return h
}
