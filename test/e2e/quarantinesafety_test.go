package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// quarantineRefusal is quarantine's Event reason on a pod it leaves alone.
const quarantineRefusal = "FencelineNotSafeToForceDelete"

// TestQuarantineLiftWithSurvivor: a quarantined node runs, besides db-0,
// a pod "keep-0" that tolerates a lost node for good and so is never
// evicted; its safe-detach volume stays attached throughout. Proves that
// the quarantine still lifts once the node is back and db-0's fenced
// volume is detached and cleaned up (the survivor's VolumeAttachment does
// not hold it), and that a short NotReady blip of the node afterwards
// releases no volume: the survivor's volume stays in volumesInUse, is
// never unpublished, and the survivor is not force-deleted.
func TestQuarantineLiftWithSurvivor(t *testing.T) {
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=3s", "--quarantine-lift-delay=2s"},
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

	s.powerOff(nodeA)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	if !slices.Contains(s.node(s.ctx, nodeA).Status.VolumesInUse, keepUnique) {
		t.Fatalf("quarantine released %s, which the surviving pod keep-0 still uses", keepUnique)
	}

	must(t, s.w.PowerOn(s.ctx, nodeA))
	s.timeline.Add(time.Now(), "node %s powered on", nodeA)
	s.waitNodeCleanedUp(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+nodeA, func(ctx context.Context) (bool, error) {
		has, err := s.w.HasTaint(ctx, nodeA, names.QuarantineTaint)
		return err == nil && !has, nil
	}))
	s.timeline.Add(time.Now(), "quarantine lifted from %s", nodeA)
	s.assertSurvived(survivor, keepHandle)

	// A short NotReady blip: the kubelet reports NotReady and, as soon as
	// the control plane has reacted to it, Ready again.
	ready, err := s.w.PostNotReady(s.ctx, nodeA)
	must(t, err)
	blip := time.Now()
	s.timeline.Add(blip, "node %s NotReady blip", nodeA)
	must(t, world.WaitFor(s.ctx, nodeLostTimeout, "not-ready taint on "+nodeA, func(ctx context.Context) (bool, error) {
		return s.w.HasTaint(ctx, nodeA, corev1.TaintNodeNotReady)
	}))
	must(t, ready(s.ctx))
	back := time.Now()
	s.timeline.Add(back, "node %s Ready after the blip", nodeA)
	// Wait until the stand-in has written to the survivor's volume after
	// the blip: the volume is still published and not fenced.
	must(t, world.WaitFor(s.ctx, startTimeout, "an accepted write to keep-0's volume after the blip", func(context.Context) (bool, error) {
		return audit.Count(s.audit(), audit.Method("Write"), audit.Volume(keepHandle), audit.Node(nodeA), audit.OK(),
			func(r audit.Record) bool { return r.Time.After(back) }) > 0, nil
	}))
	if !slices.Contains(s.node(s.ctx, nodeA).Status.VolumesInUse, keepUnique) {
		t.Fatalf("the NotReady blip released %s from %s's volumesInUse", keepUnique, nodeA)
	}
	if has, err := s.w.HasTaint(s.ctx, nodeA, names.QuarantineTaint); err != nil || has {
		t.Fatalf("%s quarantined again by a short NotReady blip (err %v)", nodeA, err)
	}
	s.assertSurvived(survivor, keepHandle)
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
