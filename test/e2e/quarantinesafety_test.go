package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// quarantineRefusal is quarantine's Event reason on a pod it leaves alone.
const quarantineRefusal = "FencelineNotSafeToForceDelete"

// TestQuarantineLiftWithSurvivor: a quarantined node runs, besides db-0,
// a pod "keep-0" that tolerates a lost node for good and so is never
// evicted; its safe-detach volume stays attached throughout. The node comes
// back, but its kubelet's clean-up of db-0's fenced volume fails for a
// while, so the quarantine stays and the kubelet still lists that volume,
// now used by no pod, in volumesInUse. Proves that a NotReady blip shorter
// than --quarantine-delay on that still-quarantined node releases nothing
// (the delay counts from the blip, not from the old episode); that once
// the clean-up succeeds the quarantine lifts although keep-0's
// VolumeAttachment remains (a pod that stayed does not hold it); and that
// another short blip after the lift releases nothing either. keep-0 is
// never force-deleted and its volume never unpublished.
func TestQuarantineLiftWithSurvivor(t *testing.T) {
	t.Parallel()
	const delay = 5 * time.Second
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=" + delay.String(), "--quarantine-lift-delay=2s"},
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	client := s.w.Cluster.Client()

	keepHandles, err := s.w.ProvisionStatefulSet(s.ctx, s.ns, "keep", 1)
	must(t, err)
	keepHandle := keepHandles[0]
	keep := world.StatefulSet(s.ns, "keep", 1)
	keep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: nodeA}
	keep.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	_, err = client.AppsV1().StatefulSets(s.ns).Create(s.ctx, keep, metav1.CreateOptions{})
	must(t, err)
	survivor, err := s.w.WaitRunning(s.ctx, s.ns, "keep-0", "", startTimeout)
	must(t, err)
	keepUnique := nodeutil.CSIUniqueVolumeName(world.DriverName, keepHandle)
	dbUnique := nodeutil.CSIUniqueVolumeName(world.DriverName, s.handle)

	s.powerOff(nodeA)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	if !slices.Contains(s.node(s.ctx, nodeA).Status.VolumesInUse, keepUnique) {
		t.Fatalf("quarantine released %s, which the surviving pod keep-0 still uses", keepUnique)
	}

	// Back, but the kubelet cannot clean up db-0's volume yet.
	must(t, s.w.SetDriverFaults(s.ctx, faults.FailNext("NodeUnpublishVolume", 1000, codes.Unavailable)))
	on := time.Now()
	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.timeline.Add(on, "node %s powered on; its clean-up fails", nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a failed clean-up of db-0's volume listed in use", func(ctx context.Context) (bool, error) {
		failed := audit.Count(s.audit(), audit.Method("NodeUnpublishVolume"), audit.Node(nodeA), audit.Volume(s.handle),
			audit.Code("Unavailable"), func(r audit.Record) bool { return r.Time.After(on) }) > 0
		return failed && slices.Contains(s.node(ctx, nodeA).Status.VolumesInUse, dbUnique), nil
	}))
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.QuarantineTaint); err != nil || !has {
		t.Fatalf("quarantine lifted from %s (err %v) before its kubelet cleaned up the fenced volume", nodeA, err)
	}
	s.shortBlip(nodeA, delay, dbUnique, keepUnique)
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.QuarantineTaint); err != nil || !has {
		t.Fatalf("quarantine lifted from %s (err %v) before its kubelet cleaned up the fenced volume", nodeA, err)
	}

	// The clean-up goes through: the quarantine lifts, keep-0's
	// VolumeAttachment notwithstanding.
	must(t, s.w.SetDriverFaults(s.ctx))
	s.waitNodeCleanedUp(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+nodeA, func(ctx context.Context) (bool, error) {
		has, err := s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
		return err == nil && !has, nil
	}))
	s.timeline.Add(time.Now(), "quarantine lifted from %s", nodeA)
	s.assertSurvived(survivor, keepHandle)

	s.shortBlip(nodeA, delay, keepUnique)
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.QuarantineTaint); err != nil || has {
		t.Fatalf("%s quarantined again by a short NotReady blip (err %v)", nodeA, err)
	}
	s.assertSurvived(survivor, keepHandle)
}

// shortBlip has node's kubelet report NotReady for one to two seconds
// (its Lease renewing), then Ready again, well within delay. It
// then checks that no volume was released: each of listed is still in the
// node's volumesInUse and no FencelineVolumesReleased Event was recorded
// for the node since the blip began.
func (s *scenario) shortBlip(node string, delay time.Duration, listed ...corev1.UniqueVolumeName) {
	s.t.Helper()
	ready, err := s.w.PostNotReady(s.ctx, node)
	must(s.t, err)
	blip := time.Now()
	s.timeline.Add(blip, "node %s NotReady blip", node)
	// The blip lasts until the control plane has marked the node (the
	// not-ready taint) and the kubelet has renewed its Lease a second
	// later, NotReady all along: one to two seconds.
	must(s.t, world.WaitFor(s.ctx, nodeLostTimeout, "not-ready taint on "+node+" and a Lease renewal a second into the blip", func(ctx context.Context) (bool, error) {
		tainted, err := s.w.HasTaint(ctx, node, corev1.TaintNodeNotReady)
		if err != nil || !tainted {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		l, err := s.w.NodeLease(ctx, node)
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(blip.Add(time.Second)), nil
	}))
	must(s.t, ready(s.ctx))
	back := time.Now()
	s.timeline.Add(back, "node %s Ready after the blip", node)
	if d := back.Sub(blip); d >= delay {
		s.t.Fatalf("setup: the blip lasted %s, not shorter than the quarantine delay %s", d, delay)
	}
	n := s.node(s.ctx, node)
	for _, v := range listed {
		if !slices.Contains(n.Status.VolumesInUse, v) {
			s.t.Fatalf("a NotReady blip of %s shorter than the quarantine delay released %s: volumesInUse = %v", node, v, n.Status.VolumesInUse)
		}
	}
	evs, err := s.w.Cluster.Client().CoreV1().Events(corev1.NamespaceDefault).List(s.ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.name", node),
			fields.OneTermEqualSelector("reason", "FencelineVolumesReleased")).String(),
	})
	must(s.t, err)
	for _, e := range evs.Items {
		if !eventTime(e).Before(blip.Truncate(time.Second)) {
			s.t.Fatalf("volumes released from %s during a short NotReady blip: %s", node, e.Message)
		}
	}
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// assertSurvived checks that pod is still the same, not force-deleted, and
// that its volume was never unpublished from its node.
func (s *scenario) assertSurvived(pod *corev1.Pod, handle string) {
	s.t.Helper()
	cur, err := s.w.Cluster.Client().CoreV1().Pods(pod.Namespace).Get(s.ctx, pod.Name, metav1.GetOptions{})
	must(s.t, err)
	if cur.UID != pod.UID || cur.DeletionTimestamp != nil {
		s.t.Fatalf("surviving pod %s replaced or deleted (uid %s -> %s, deletion %v)", pod.Name, pod.UID, cur.UID, cur.DeletionTimestamp)
	}
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(handle)); n != 0 {
		s.t.Fatalf("%d ControllerUnpublishVolume calls of the surviving pod's volume %s", n, handle)
	}
	for _, d := range s.forceDeletedPods(s.ctx) {
		if strings.HasPrefix(d, pod.Name+"/") {
			s.t.Fatalf("surviving pod %s was force-deleted", pod.Name)
		}
	}
}

// TestQuarantineRefusesReadWriteMany: the lost node's pod uses a volume of
// the safe-detach driver whose PV allows ReadWriteMany. A per-node fence
// is not what the driver promised for shared volumes, so quarantine must
// refuse: a FencelineNotSafeToForceDelete Event on the pod naming
// ReadWriteMany, no quarantine taint, nothing force-deleted, the volume
// still in the node's volumesInUse, no unpublish at the driver, and the
// node's writes (it may still be running) still accepted.
func TestQuarantineRefusesReadWriteMany(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	client := s.w.Cluster.Client()
	handles, err := s.w.ProvisionStatefulSetWithAccessModes(s.ctx, s.ns, "shared", 1, corev1.ReadWriteOnce, corev1.ReadWriteMany)
	must(t, err)
	s.handle = handles[0]
	_, err = client.AppsV1().StatefulSets(s.ns).Create(s.ctx, world.StatefulSet(s.ns, "shared", 1), metav1.CreateOptions{})
	must(t, err)
	pod, err := s.w.WaitRunning(s.ctx, s.ns, "shared-0", "", startTimeout)
	must(t, err)
	nodeA := pod.Spec.NodeName
	s.waitAcceptedWrite(nodeA, time.Time{})

	s.powerOff(nodeA)
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", pod.Name),
		fields.OneTermEqualSelector("reason", quarantineRefusal)).String()
	var refused time.Time
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a "+quarantineRefusal+" Event naming ReadWriteMany", func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.UID == pod.UID && strings.Contains(e.Message, "ReadWriteMany") {
				t.Logf("refusal: %s", e.Message)
				refused = time.Now()
				return true, nil
			}
		}
		return false, nil
	}))
	// The zombie keeps writing, and the array keeps accepting: nothing
	// was fenced. Waiting for such a write after the refusal also gives the
	// controller time to act wrongly, if it would.
	must(t, world.WaitFor(s.ctx, startTimeout, "an accepted zombie write after the refusal", func(context.Context) (bool, error) {
		return audit.Count(s.audit(), audit.Method("Write"), audit.Node(nodeA), audit.Volume(s.handle), audit.OK(),
			func(r audit.Record) bool { return r.Time.After(refused.Add(2 * time.Second)) }) > 0, nil
	}))
	cur, err := client.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{})
	must(t, err)
	if cur.UID != pod.UID {
		t.Fatalf("pod %s replaced (uid %s -> %s) although quarantine refused", pod.Name, pod.UID, cur.UID)
	}
	if d := s.forceDeletedPods(s.ctx); len(d) != 0 {
		t.Fatalf("pods force-deleted although quarantine refused: %v", d)
	}
	n := s.node(s.ctx, nodeA)
	if !slices.Contains(n.Status.VolumesInUse, nodeutil.CSIUniqueVolumeName(world.DriverName, s.handle)) {
		t.Fatalf("%s's volumesInUse released (%v) although quarantine refused", nodeA, n.Status.VolumesInUse)
	}
	if nodeutil.HasTaint(n, names.QuarantineTaint) {
		t.Fatalf("%s quarantined although its only pod was refused", nodeA)
	}
	if c := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle)); c != 0 {
		t.Fatalf("%d ControllerUnpublishVolume calls although quarantine refused", c)
	}
}
