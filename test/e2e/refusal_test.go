package e2e

import (
	"context"
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
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Driver:         world.DriverOptions{SafeDetach: true, NoFence: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	pod := s.startDB()
	s.powerOff(pod.Spec.NodeName)
	s.waitRefused(pod, "UNPUBLISH_FENCE")
}

// TestUpstreamAttacherWithFencelineController: the driver's sidecar runs
// upstream's csi-attacher (switched back, or never swapped) while
// fenceline-controller's quarantine is on and the CSIDriver still carries
// the safe-detach annotation. No fenceline-attacher heartbeat proves that
// detaches will be fenced, so quarantine refuses.
func TestUpstreamAttacherWithFencelineController(t *testing.T) {
	upstream, err := cluster.Tool("csi-attacher")
	must(t, err)
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		AttacherPath:   upstream,
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=1s"},
	})
	pod := s.startDB()
	s.powerOff(pod.Spec.NodeName)
	s.waitRefused(pod, "heartbeat")
}

// waitRefused waits for quarantine's refusal Event on pod, whose message
// must name what is missing, then checks that nothing was acted on: the pod
// is still there (not force-deleted), its node still lists the volume in
// use, and the driver saw no ControllerUnpublishVolume.
func (s *scenario) waitRefused(pod *corev1.Pod, missing string) {
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
	node, err := client.CoreV1().Nodes().Get(s.ctx, pod.Spec.NodeName, metav1.GetOptions{})
	must(s.t, err)
	if len(node.Status.VolumesInUse) == 0 {
		s.t.Fatalf("node %s volumesInUse was released although quarantine refused", node.Name)
	}
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle)); n != 0 {
		s.t.Fatalf("%d ControllerUnpublishVolume calls although quarantine refused", n)
	}
}
