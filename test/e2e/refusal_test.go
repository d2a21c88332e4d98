package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// eventNotSafe is fenceline-controller's Event reason on a pod that
// quarantine leaves alone.
const eventNotSafe = "FencelineNotSafeToForceDelete"

// TestSafeDetachDriverCannotFence: the CSIDriver is annotated safe-detach but
// the driver does not advertise UNPUBLISH_FENCE. Nobody vouched that the lost
// node is off and the fence is the only protection, so quarantine must not
// force-delete its pod or release its volume: it says why with an Event
// naming what is missing, and the volume stays attached.
func TestSafeDetachDriverCannotFence(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true, NoFence: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	pod := s.startDB()
	inUse := s.mustBeInUse(pod.Spec.NodeName)
	s.powerOff(pod.Spec.NodeName)
	s.waitRefused(pod, "UNPUBLISH_FENCE", inUse)
}

// TestSafeDetachDriverWithoutAttachStep: the CSIDriver is annotated
// safe-detach but says attachRequired: false. Its volumes never go through a
// VolumeAttachment, so no attacher ever fences them: quarantine refuses with
// an Event naming attachRequired and leaves the pod alone.
func TestSafeDetachDriverWithoutAttachStep(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true, NoAttach: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	pod := s.startDB()
	if n := audit.Count(s.audit(), audit.Method("ControllerPublishVolume")); n != 0 {
		t.Fatalf("%d ControllerPublishVolume calls for a driver without an attach step", n)
	}
	// Like the kubelet, the stand-in reports only attachable volumes in use.
	inUse := s.volumesInUse(pod.Spec.NodeName)
	if len(inUse) != 0 {
		t.Fatalf("node %s reports %v in use; a volume without an attach step is never reported", pod.Spec.NodeName, inUse)
	}
	s.powerOff(pod.Spec.NodeName)
	s.waitRefused(pod, "attachRequired", inUse)
}

// TestUpstreamAttacherWithFencelineController: the driver's sidecar runs
// upstream's csi-attacher (switched back, or never swapped) while
// fenceline-controller's quarantine is on and the CSIDriver still carries
// the safe-detach annotation. No fenceline-attacher heartbeat proves that
// detaches will be fenced, so quarantine refuses.
func TestUpstreamAttacherWithFencelineController(t *testing.T) {
	t.Parallel()
	upstream, err := cluster.Tool("csi-attacher")
	must(t, err)
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		AttacherPath:   upstream,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	pod := s.startDB()
	inUse := s.mustBeInUse(pod.Spec.NodeName)
	s.powerOff(pod.Spec.NodeName)
	s.waitRefused(pod, "heartbeat", inUse)
}

// volumesInUse returns the node's status.volumesInUse.
func (s *scenario) volumesInUse(node string) []corev1.UniqueVolumeName {
	s.t.Helper()
	n, err := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, node, metav1.GetOptions{})
	must(s.t, err)
	return n.Status.VolumesInUse
}

// mustBeInUse returns the node's volumesInUse, which must list the db
// volume, so that "still in use" checks later are not vacuous.
func (s *scenario) mustBeInUse(node string) []corev1.UniqueVolumeName {
	s.t.Helper()
	inUse := s.volumesInUse(node)
	if !slices.ContainsFunc(inUse, func(v corev1.UniqueVolumeName) bool { return strings.HasSuffix(string(v), "^"+s.handle) }) {
		s.t.Fatalf("node %s volumesInUse %v does not list volume %s", node, inUse, s.handle)
	}
	return inUse
}

// waitRefused waits for quarantine's refusal Event on pod, whose message
// must name what is missing, then checks that nothing was acted on: the pod
// is still there (not force-deleted), its node still lists every volume it
// listed in use before (inUse), and the driver saw no
// ControllerUnpublishVolume.
func (s *scenario) waitRefused(pod *corev1.Pod, missing string, inUse []corev1.UniqueVolumeName) {
	s.t.Helper()
	client := s.w.Cluster.Client()
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", pod.Name),
		fields.OneTermEqualSelector("reason", eventNotSafe)).String()
	var msg string
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "a "+eventNotSafe+" Event on "+pod.Name, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.UID == pod.UID && strings.Contains(e.Message, missing) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	}))
	s.t.Logf("refusal: %s", msg)
	cur, err := client.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{})
	must(s.t, err)
	if cur.UID != pod.UID {
		s.t.Fatalf("pod %s was replaced (uid %s -> %s) although quarantine refused", pod.Name, pod.UID, cur.UID)
	}
	now := s.volumesInUse(pod.Spec.NodeName)
	for _, v := range inUse {
		if !slices.Contains(now, v) {
			s.t.Fatalf("node %s: volume %s released from volumesInUse although quarantine refused (now %v)", pod.Spec.NodeName, v, now)
		}
	}
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle)); n != 0 {
		s.t.Fatalf("%d ControllerUnpublishVolume calls although quarantine refused", n)
	}
}
