package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// forceDeletedPods returns the names of the pods in the scenario's
// namespace that fenceline-controller reported force-deleted.
func (s *scenario) forceDeletedPods(ctx context.Context) []string {
	s.t.Helper()
	evs, err := s.w.Cluster.Client().CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "FencelineForceDeleted").String(),
	})
	must(s.t, err)
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.InvolvedObject.Name+"/"+string(e.InvolvedObject.UID))
	}
	return out
}

// vaOf returns the name of the VolumeAttachment of the db volume to node,
// or "" if there is none.
func (s *scenario) vaOf(ctx context.Context, node string) string {
	s.t.Helper()
	vas, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	must(s.t, err)
	pv, err := s.w.Cluster.Client().CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	must(s.t, err)
	var pvName string
	for _, p := range pv.Items {
		if p.Spec.CSI != nil && p.Spec.CSI.VolumeHandle == s.handle {
			pvName = p.Name
		}
	}
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pvName {
			return va.Name
		}
	}
	return ""
}

func (s *scenario) node(ctx context.Context, name string) *corev1.Node {
	s.t.Helper()
	n, err := s.w.Cluster.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	must(s.t, err)
	return n
}

// TestForceEvictionNodeReturnsDuringDetach: the force-eviction taint
// evicts db-0 from a partitioned node, but the driver fails the fenced
// unpublish, so the VolumeAttachment is still there when the partition
// heals and the kubelet is back. Proves the proposal's third race: no pod
// but db-0 is force-deleted (a pod bound to the node after its return is
// left to the taint manager and its kubelet), the taint stays (so the
// attacher keeps fencing) for as long as a VolumeAttachment of the evicted
// pod remains, even across several detach retries after the return, and
// is removed, with the evicted-volumes record, once the fenced detach went
// through. The failover invariant holds over the driver's audit log.
func TestForceEvictionNodeReturnsDuringDetach(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	s.forceEvictionNodeReturns(s.startDB())
}

// forceEvictionNodeReturns is the story of
// TestForceEvictionNodeReturnsDuringDetach on db-0, running as pod.
func (s *scenario) forceEvictionNodeReturns(pod *corev1.Pod) {
	t := s.t
	nodeA := pod.Spec.NodeName
	// Hold the detach open until the test lets it through.
	must(t, s.w.SetDriverFaults(s.ctx, faults.FailNext("ControllerUnpublishVolume", 1000, codes.Unavailable)))

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s partitioned", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	must(t, s.w.AddTaint(s.ctx, nodeA, forceEvictionTaint))
	s.timeline.Add(time.Now(), "force-eviction taint added to %s", nodeA)
	failedFence := func(after time.Time) int { return s.failedFencedUnpublishes(nodeA, after) }
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a failed fenced unpublish from "+nodeA, func(context.Context) (bool, error) {
		return failedFence(time.Time{}) > 0, nil
	}))
	if _, ok := s.node(s.ctx, nodeA).Annotations[forceeviction.EvictedVolumesAnnotation]; !ok {
		t.Fatalf("%s has no %s record although db-0 was evicted", nodeA, forceeviction.EvictedVolumesAnnotation)
	}

	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	back := time.Now()
	s.timeline.Add(back, "partition of %s healed", nodeA)
	// A pod that lands on the node after its return must be left to its
	// kubelet.
	late := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "late"},
		Spec: corev1.PodSpec{
			NodeName:                      nodeA,
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.example/late:1"}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	_, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Create(s.ctx, late, metav1.CreateOptions{})
	must(t, err)

	// The detach keeps failing after the return; two retries later the
	// controller has long seen the node Ready and its Lease renewed.
	must(t, world.WaitFor(s.ctx, failoverTimeout, "two failed fenced unpublishes after the return", func(context.Context) (bool, error) {
		return failedFence(back) >= 2, nil
	}))
	if va := s.vaOf(s.ctx, nodeA); va == "" {
		t.Fatalf("setup: no VolumeAttachment of %s to %s while the detach fails", s.handle, nodeA)
	}
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.ForceEvictionTaint); err != nil || !has {
		t.Fatalf("force-eviction taint removed from %s (err %v) while the evicted pod's VolumeAttachment remains", nodeA, err)
	}
	if _, ok := s.node(s.ctx, nodeA).Annotations[forceeviction.EvictedVolumesAnnotation]; !ok {
		t.Fatalf("evicted-volumes record removed from %s while the evicted pod's VolumeAttachment remains", nodeA)
	}

	// Let the detach through: the taint and the record go once it is done.
	must(t, s.w.SetDriverFaults(s.ctx))
	must(t, world.WaitFor(s.ctx, failoverTimeout, "VolumeAttachment of "+s.handle+" to "+nodeA+" gone", func(ctx context.Context) (bool, error) {
		return s.vaOf(ctx, nodeA) == "", nil
	}))
	s.waitUntainted(nodeA, names.ForceEvictionTaint)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "evicted-volumes record cleared on "+nodeA, func(ctx context.Context) (bool, error) {
		_, ok := s.node(ctx, nodeA).Annotations[forceeviction.EvictedVolumesAnnotation]
		return !ok, nil
	}))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertInvariant(nodeA, moved.Spec.NodeName)
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA), func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain ControllerUnpublishVolume calls from %s; every one must be fenced", n, nodeA)
	}
	deleted := s.forceDeletedPods(s.ctx)
	if len(deleted) != 1 || deleted[0] != "db-0/"+string(pod.UID) {
		t.Fatalf("force-deleted pods: %v, want only db-0 (uid %s)", deleted, pod.UID)
	}
}

// TestForceEvictionLiveKubeletPostsNotReady: the node's kubelet reports
// the node NotReady itself (its container runtime is down) but keeps
// renewing its node Lease, and an operator adds the force-eviction taint.
// Proves that the Lease counts as a sign of life: nothing is force-deleted
// and nothing is detached for as long as the Lease renews, even after the
// ready grace has passed since the NotReady and since the taint, and the
// taint is removed once the kubelet reports Ready again.
func TestForceEvictionLiveKubeletPostsNotReady(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName

	ready, err := s.w.PostNotReady(s.ctx, nodeA)
	must(t, err)
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "kubelet of %s posts NotReady, Lease renewing", nodeA)
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionFalse, nodeLostTimeout))
	must(t, s.w.AddTaint(s.ctx, nodeA, forceEvictionTaint))
	tainted := time.Now()
	s.timeline.Add(tainted, "force-eviction taint added to %s", nodeA)

	// The controller acts within a second of the taint on a node it
	// thinks dead. Wait until the Lease was renewed well past the ready
	// grace after the taint (a renewal from before the NotReady would be
	// stale by then) while the node is still NotReady.
	grace := cluster.NodeMonitorGracePeriod
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a Lease renewal past the ready grace", func(ctx context.Context) (bool, error) {
		l, err := s.w.NodeLease(ctx, nodeA)
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(tainted.Add(grace+time.Second)), nil
	}))
	n := s.node(s.ctx, nodeA)
	if c := readyCondition(n); c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("setup: %s is not NotReady any more: %+v", nodeA, c)
	}
	if deleted := s.forceDeletedPods(s.ctx); len(deleted) != 0 {
		t.Fatalf("pods force-deleted from a node whose kubelet renews its Lease: %v", deleted)
	}
	cur, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(s.ctx, "db-0", metav1.GetOptions{})
	must(t, err)
	if cur.UID != pod.UID {
		t.Fatalf("db-0 was replaced (uid %s -> %s) while its kubelet renewed its Lease", pod.UID, cur.UID)
	}
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle)); n != 0 {
		t.Fatalf("%d ControllerUnpublishVolume calls while the kubelet renewed its Lease", n)
	}
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.ForceEvictionTaint); err != nil || !has {
		t.Fatalf("force-eviction taint removed from %s (err %v) while its kubelet still reports NotReady", nodeA, err)
	}

	// The kubelet reports Ready again: the taint goes, nothing was evicted.
	must(t, ready(s.ctx))
	s.timeline.Add(time.Now(), "kubelet of %s reports Ready", nodeA)
	s.waitUntainted(nodeA, names.ForceEvictionTaint)
	if deleted := s.forceDeletedPods(s.ctx); len(deleted) != 0 {
		t.Fatalf("pods force-deleted after the kubelet came back: %v", deleted)
	}
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
