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
// node go through the same story (attach, start, then a scale-down, or a
// partition or a power cycle during which the pod is force-deleted, then
// the clean-up and the detach), and the two nodes must show the same sequence of CSI node calls (with their force
// fields), the same history of the volume in volumesInUse relative to
// those calls and to the detach, the same history of the volume in the
// node's volumesInUse and volumesAttached, and, where the kubelet deletes
// the pod, the same pod status history (phase, deletion mark, readiness,
// container states), with the pod deleted only after its volume was
// unpublished.
//
// The test found two differences, both fixed in the stand-in: its pods
// went from Pending to Running without the admitted state (Pending, not
// Ready, containers being created), and were deleted as soon as they were
// marked for deletion, where the kubelet reports them Succeeded and
// deletes them only once their volumes are unpublished.
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
	for _, st := range []struct {
		name string
		// leave ends the pod's life on node: the pod must be gone, and
		// the node free to clean up its volume, when it returns.
		leave func(ctx context.Context, t *testing.T, w *world.World, node string)
		// graceful: the kubelet deletes the pod; its status history is
		// compared too. Otherwise the harness force-deletes it while the
		// node is away, and its history depends on when.
		graceful bool
	}{
		{name: "scale-down", graceful: true, leave: func(ctx context.Context, t *testing.T, w *world.World, node string) {
			scaleToZero(ctx, t, w, "db-"+node)
		}},
		{name: "partition heals after the pod was force-deleted", leave: func(ctx context.Context, t *testing.T, w *world.World, node string) {
			must(t, w.Partition(ctx, node))
			forceDeleteAway(ctx, t, w, node)
			must(t, w.PartitionHeal(ctx, node))
		}},
		{name: "power cycle after the pod was force-deleted", leave: func(ctx context.Context, t *testing.T, w *world.World, node string) {
			must(t, w.PowerOff(ctx, node))
			forceDeleteAway(ctx, t, w, node)
			must(t, w.PowerOn(ctx, node))
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			compareStory(t, st.leave, st.graceful)
		})
	}
}

// forceDeleteAway scales node's StatefulSet down, so that its pod is not
// created again, and force-deletes the pod, as an operator or
// Fenceline does while the node is away.
func forceDeleteAway(ctx context.Context, t *testing.T, w *world.World, node string) {
	t.Helper()
	scaleToZero(ctx, t, w, "db-"+node)
	err := w.Cluster.Client().CoreV1().Pods(ns).Delete(ctx, "db-"+node+"-0", *metav1.NewDeleteOptions(0))
	must(t, err)
}

// compareStory runs one story on a stand-in node and on a real-kubelet
// node of one world, at once, and compares what TestStandInMatchesRealKubelet
// says.
func compareStory(t *testing.T, leave func(context.Context, *testing.T, *world.World, string), graceful bool) {
	const standIn, real = "node-a", "real-a"
	ctx, w := startWorld(t, world.Options{Nodes: []string{standIn}, RealKubelets: []string{real}})
	hist := watchNodeVolumes(ctx, t, w)
	pods := watchPods(ctx, t, w)
	handles := map[string]string{}
	for _, node := range []string{standIn, real} {
		handles[node] = createOn(ctx, t, w, "db-"+node, node)
	}
	for _, node := range []string{standIn, real} {
		_, err := w.WaitRunning(ctx, ns, "db-"+node+"-0", "", 2*time.Minute)
		must(t, err)
	}
	for _, node := range []string{standIn, real} {
		leave(ctx, t, w, node)
	}
	for node, h := range handles {
		waitDetached(ctx, t, w, node, h)
	}
	recs, err := w.Audit()
	must(t, err)
	seqs, states := map[string][]string{}, map[string][]string{}
	for node, h := range handles {
		changes := hist.of(node, nodeutil.CSIUniqueVolumeName(world.DriverName, h))
		seqs[node], states[node] = lifeOf(recs, changes, node, h), nodeStates(changes)
	}
	t.Logf("stand-in: %v", seqs[standIn])
	t.Logf("real kubelet: %v", seqs[real])
	if !slices.Equal(seqs[standIn], seqs[real]) {
		t.Fatalf("the stand-in's volume life differs from the real kubelet's:\n stand-in:     %v\n real kubelet: %v", seqs[standIn], seqs[real])
	}
	t.Logf("stand-in's node status: %v", states[standIn])
	t.Logf("real kubelet's node status: %v", states[real])
	if !slices.Equal(states[standIn], states[real]) {
		t.Fatalf("the volume's history in the node's status differs:\n stand-in:     %v\n real kubelet: %v", states[standIn], states[real])
	}
	if !graceful {
		return
	}
	phases := map[string][]string{}
	for node, h := range handles {
		name := "db-" + node + "-0"
		// The kubelet deletes the pod after the unpublish, on its own
		// schedule: maybe after the detach.
		must(t, world.WaitFor(ctx, time.Minute, "pod "+name+" deleted", func(context.Context) (bool, error) {
			_, ok := pods.deletedAt(name)
			return ok, nil
		}))
		phases[node] = pods.of(name)
		deleted, ok := pods.deletedAt(name)
		unpub := audit.FirstIndex(recs, audit.Method("NodeUnpublishVolume"), audit.Node(node), audit.Volume(h), audit.OK())
		if !ok || unpub < 0 || deleted.Before(recs[unpub].Time) {
			t.Fatalf("pod %s deleted at %v (seen: %t), before its volume was unpublished (audit record %d)", name, deleted, ok, unpub)
		}
	}
	t.Logf("stand-in's pod: %v", phases[standIn])
	t.Logf("real kubelet's pod: %v", phases[real])
	if !slices.Equal(phases[standIn], phases[real]) {
		t.Fatalf("the pod's status history differs:\n stand-in:     %v\n real kubelet: %v", phases[standIn], phases[real])
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
	entered, was := 0, false
	for _, c := range inUse {
		switch {
		case c.in && !was:
			entered++
		case !c.in && was:
			steps = append(steps, step{c.at, "volumesInUse-"})
		}
		was = c.in
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
// when this process saw it, with whether the node's volumesAttached listed
// it then.
type inUseChange struct {
	at       time.Time
	in       bool
	attached bool
}

// nodeStates turns a volume's history on a node into the sequence of its
// states in the node's status ("inUse", "attached", both, or "neither"),
// as the watch of the one Node object gives them, in order. The states up
// to the first with both (the order of the kubelet's report and the
// attach is timing, see above) become one "inUse+attached".
func nodeStates(changes []inUseChange) []string {
	var out []string
	both := false
	for _, c := range changes {
		s := "neither"
		switch {
		case c.in && c.attached:
			s = "inUse+attached"
		case c.in:
			s = "inUse"
		case c.attached:
			s = "attached"
		}
		if !both && s != "inUse+attached" {
			continue
		}
		both = true
		if len(out) == 0 || out[len(out)-1] != s {
			out = append(out, s)
		}
	}
	return out
}

// nodeHistory records, per node and volume, the changes of the volume in
// the node's volumesInUse and volumesAttached.
type nodeHistory struct {
	mu   sync.Mutex
	last map[string]map[corev1.UniqueVolumeName]inUseChange
	seen map[string][]volumeChange
}

type volumeChange struct {
	volume corev1.UniqueVolumeName
	inUseChange
}

// of returns the changes of one volume on node.
func (h *nodeHistory) of(node string, volume corev1.UniqueVolumeName) []inUseChange {
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

// watchNodeVolumes records every change of every node's volumesInUse and
// volumesAttached until ctx ends.
func watchNodeVolumes(ctx context.Context, t *testing.T, w *world.World) *nodeHistory {
	t.Helper()
	h := &nodeHistory{last: map[string]map[corev1.UniqueVolumeName]inUseChange{}, seen: map[string][]volumeChange{}}
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
			cur := map[corev1.UniqueVolumeName]inUseChange{}
			for _, v := range n.Status.VolumesInUse {
				c := cur[v]
				c.at, c.in = now, true
				cur[v] = c
			}
			for _, a := range n.Status.VolumesAttached {
				c := cur[a.Name]
				c.at, c.attached = now, true
				cur[a.Name] = c
			}
			h.mu.Lock()
			before := h.last[n.Name]
			for v := range before {
				if _, ok := cur[v]; !ok {
					cur[v] = inUseChange{at: now}
				}
			}
			for v, c := range cur {
				if b, ok := before[v]; !ok || b.in != c.in || b.attached != c.attached {
					h.seen[n.Name] = append(h.seen[n.Name], volumeChange{v, c})
				}
			}
			for v, c := range cur {
				if !c.in && !c.attached {
					delete(cur, v)
				}
			}
			h.last[n.Name] = cur
			h.mu.Unlock()
		}
	}()
	return h
}

// podHistory records the status history of the namespace's pods: each
// change of phase, deletion mark, readiness or container states, and the
// deletion.
type podHistory struct {
	mu      sync.Mutex
	seen    map[string][]string
	deleted map[string]time.Time
}

// of returns the status history of pod name.
func (h *podHistory) of(name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen[name])
}

// deletedAt returns when this process saw pod name deleted.
func (h *podHistory) deletedAt(name string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.deleted[name]
	return at, ok
}

// podState sums up what of a pod's status the comparison looks at.
func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += "+terminating"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			s += "+ready=" + string(c.Status)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Running != nil:
			s += "+running"
		case c.State.Terminated != nil:
			s += fmt.Sprintf("+exited(%d)", c.State.Terminated.ExitCode)
		case c.State.Waiting != nil:
			s += "+waiting(" + c.State.Waiting.Reason + ")"
		}
	}
	return s
}

// watchPods records the status history of the namespace's pods until ctx
// ends.
func watchPods(ctx context.Context, t *testing.T, w *world.World) *podHistory {
	t.Helper()
	h := &podHistory{seen: map[string][]string{}, deleted: map[string]time.Time{}}
	wi, err := w.Cluster.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(fmt.Errorf("watching pods: %w", err))
	}
	t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			s := podState(p)
			h.mu.Lock()
			if ev.Type == watch.Deleted {
				s = "deleted"
				h.deleted[p.Name] = time.Now()
			}
			if seen := h.seen[p.Name]; len(seen) == 0 || seen[len(seen)-1] != s {
				h.seen[p.Name] = append(seen, s)
			}
			h.mu.Unlock()
		}
	}()
	return h
}
