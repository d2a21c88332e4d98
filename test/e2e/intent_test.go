package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/test/world"
)

// attacherDownFor is how long fenceline-attacher stays down across the
// heal: a pod rescheduled, an image pulled, a leader handed over.
const attacherDownFor = 10 * time.Second

// TestAttacherDownAcrossHeal is the path that once ended with two writers
// and no human: a node is partitioned (not powered off: its writer goes
// on), fenceline-attacher is down, another actor makes the detach
// inevitable, the partition heals and the node is Ready again before the
// attacher is back. The node still has the volume staged (its clean-up
// fails, as when a process holds it open). Whatever the node looks like by
// then, the detach must be fenced: the actor recorded its fence intent
// before it acted. Three actors:
//
//   - quarantine (a safe-detach driver, no human);
//   - force-eviction (an operator's fenceline.io/force-eviction taint);
//   - an operator's out-of-service taint, removed once the node is back,
//     before the attacher acted (the attach/detach controller detaches the
//     moment the taint lands, before any pod is deleted).
func TestAttacherDownAcrossHeal(t *testing.T) {
	t.Parallel()
	t.Run("quarantine", func(t *testing.T) {
		s := newScenario(t, world.Options{
			ZombieWrites:   true,
			HeldOpen:       true,
			Driver:         world.DriverOptions{SafeDetach: true},
			ControllerArgs: []string{"--quarantine-delay=2s"},
		})
		s.attacherDownAcrossHeal(func(string) {}, func(string) {})
	})
	t.Run("force-eviction", func(t *testing.T) {
		s := newScenario(t, world.Options{ZombieWrites: true, HeldOpen: true})
		s.attacherDownAcrossHeal(func(node string) {
			must(s.t, s.w.AddTaint(s.ctx, node, forceEvictionTaint))
			s.timeline.Add(time.Now(), "force-eviction taint added to %s", node)
		}, func(string) {})
	})
	t.Run("out-of-service removed after the return", func(t *testing.T) {
		s := newScenario(t, world.Options{ZombieWrites: true, HeldOpen: true})
		s.attacherDownAcrossHeal(func(node string) {
			must(s.t, s.w.AddTaint(s.ctx, node, world.OutOfServiceTaint))
			s.timeline.Add(time.Now(), "out-of-service taint added to %s", node)
		}, func(node string) {
			must(s.t, s.w.RemoveTaint(s.ctx, node, world.OutOfServiceTaint.Key))
			s.timeline.Add(time.Now(), "out-of-service taint removed from %s by the operator", node)
		})
	})
}

// attacherDownAcrossHeal runs the four steps: partition db-0's node and
// stop the attacher; cut (what makes the detach inevitable) until the
// attach/detach controller deletes the VolumeAttachment; heal, then
// afterHeal; start the attacher attacherDownFor after it stopped. It checks
// that every unpublish from the node was fenced and the failover
// invariant over the driver's audit log.
func (s *scenario) attacherDownAcrossHeal(cut, afterHeal func(node string)) {
	t := s.t
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	// The node keeps the volume staged after the heal and a process holds
	// it open and writes (world.Options.HeldOpen): its kubelet's clean-up
	// fails.
	must(t, s.w.SetDriverFaults(s.ctx, faults.FailNext("NodeUnpublishVolume", 1000, codes.Unavailable)))

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s partitioned", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	must(t, s.w.StopAttacher())
	stopped := time.Now()
	s.timeline.Add(stopped, "fenceline-attacher stopped")

	cut(nodeA)
	va := ""
	must(t, world.WaitFor(s.ctx, failoverTimeout, "the VolumeAttachment of "+nodeA+" deleted (the detach made inevitable)", func(ctx context.Context) (bool, error) {
		name := s.vaOf(ctx, nodeA)
		if name == "" {
			return false, nil
		}
		got, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		va = name
		return got.DeletionTimestamp != nil, nil
	}))
	s.timeline.Add(time.Now(), "VolumeAttachment %s deleted, waiting for the attacher", va)
	// The replacement is placed while the node is still cut off, as in a
	// cluster whose StatefulSet controller keeps up; on a loaded machine
	// it could otherwise be placed after the heal, back on the node (once
	// the operator removed its taint), which is not this story.
	must(t, world.WaitFor(s.ctx, failoverTimeout, "db-0's replacement scheduled off "+nodeA, func(ctx context.Context) (bool, error) {
		p, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.UID != pod.UID && p.Spec.NodeName != "" && p.Spec.NodeName != nodeA, nil
	}))
	s.timeline.Add(time.Now(), "db-0's replacement scheduled off %s", nodeA)

	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	s.timeline.Add(time.Now(), "partition of %s healed, node Ready", nodeA)
	afterHeal(nodeA)
	must(t, world.WaitFor(s.ctx, failoverTimeout, nodeA+" lists the volume in volumesInUse again", func(ctx context.Context) (bool, error) {
		for _, v := range s.node(ctx, nodeA).Status.VolumesInUse {
			if string(v) == "kubernetes.io/csi/"+world.DriverName+"^"+s.handle {
				return true, nil
			}
		}
		return false, nil
	}))
	// The fault lasts attacherDownFor: the attacher is down, not slow.
	s.waitUntil(stopped.Add(attacherDownFor), "fenceline-attacher down for "+attacherDownFor.String())
	must(t, s.w.StartAttacher())
	s.timeline.Add(time.Now(), "fenceline-attacher started")

	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	recs := s.audit()
	if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA), func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain ControllerUnpublishVolume calls from %s; the detach was made inevitable while the node was cut off, so every one must be fenced", n, nodeA)
	}
	if s.fenceIndex(recs, nodeA) < 0 {
		t.Fatalf("no successful fenced unpublish of %s from %s", s.handle, nodeA)
	}
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
}
