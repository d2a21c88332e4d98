package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestFenceRecordRemovedByThirdParty: the attacher decided a fenced detach
// (an operator's out-of-service taint on a node that is off) and the
// driver keeps failing it. While it fails, someone with write access to
// VolumeAttachments (a clean-up script, a GitOps tool) strips Fenceline's
// annotations from the VolumeAttachment. The attacher must write them back
// (Warning FenceRecordRestored on the claim) rather than read their absence
// as "plain", and every unpublish from the node stays fenced, also once the
// node is powered on and Ready again with no taint left.
func TestFenceRecordRemovedByThirdParty(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true, HeldOpen: true})
	nodeA := s.fencedDetachFailing()
	va := s.vaOf(s.ctx, nodeA)
	if va == "" {
		t.Fatalf("no VolumeAttachment of %s left while its detach fails", nodeA)
	}

	// The node comes back and the operator lifts the taint: from here on
	// only the record says the detach must be fenced.
	must(t, s.w.PowerOn(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionTrue, failoverTimeout))
	must(t, s.w.RemoveTaint(s.ctx, nodeA, world.OutOfServiceTaint.Key))
	s.timeline.Add(time.Now(), "%s Ready again, out-of-service taint removed", nodeA)

	s.stripFenceAnnotations(va)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "the fence record written back on "+va, func(ctx context.Context) (bool, error) {
		got, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(ctx, va, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, ok := got.Annotations[names.FenceRecordAnnotation]
		return ok, nil
	}))

	// The driver recovers: the detach that completes must be fenced.
	must(t, s.w.SetDriverFaults(s.ctx))
	s.timeline.Add(time.Now(), "driver faults cleared")
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA),
		func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain ControllerUnpublishVolume calls from %s after its fence record was removed by a third party", n, nodeA)
	}
	// The node rebooted: no zombie writes to judge, only the order of the
	// calls.
	s.assertPublishAfterFence(nodeA, moved.Spec.NodeName)
	s.waitClaimEvent(world.ClaimTemplate+"-db-0", "FenceRecordRestored")
}

// fencedDetachFailing starts db-0, makes every ControllerUnpublishVolume
// fail, powers db-0's node off and puts it out of service, and returns
// that node once a fenced unpublish from it has failed.
func (s *scenario) fencedDetachFailing() string {
	s.t.Helper()
	node := s.startDB().Spec.NodeName
	must(s.t, s.w.SetDriverFaults(s.ctx, faults.FailNext("ControllerUnpublishVolume", 1000, codes.Unavailable)))
	s.powerOff(node)
	must(s.t, s.w.AddTaint(s.ctx, node, world.OutOfServiceTaint))
	s.timeline.Add(time.Now(), "out-of-service taint added to %s", node)
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "a failed fenced unpublish from "+node, func(context.Context) (bool, error) {
		return audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(node),
			audit.Fenced(), audit.Code("Unavailable")) > 0, nil
	}))
	return node
}

// stripFenceAnnotations removes Fenceline's fence record and intent from
// the VolumeAttachment, as a third party would: one merge patch.
func (s *scenario) stripFenceAnnotations(va string) {
	s.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		names.FenceRecordAnnotation: nil, names.FenceIntentAnnotation: nil,
	}}})
	must(s.t, err)
	_, err = s.w.Cluster.Client().StorageV1().VolumeAttachments().Patch(s.ctx, va, types.MergePatchType, patch, metav1.PatchOptions{})
	must(s.t, err)
	s.timeline.Add(time.Now(), "fence record and intent removed from %s by a third party", va)
}

// TestPublishHeldWhileFencedDetachFailsAfterNodeDeleted: a node is off, the
// operator puts it out of service, and the fenced detach of its volume
// keeps failing; the operator then deletes the Node (the machine is being
// decommissioned). The pod is recreated elsewhere and a VolumeAttachment
// for its new node appears while the old one still awaits its fenced
// detach. fenceline-attacher must not send ControllerPublishVolume to the
// new node until that detach succeeded: it holds the attach (AttachHeld on
// the claim, attachError on the VolumeAttachment). This mock array refuses
// a second attachment by itself; a driver that does not would otherwise
// attach twice, so the test judges the calls the driver received, not
// their outcome.
func TestPublishHeldWhileFencedDetachFailsAfterNodeDeleted(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{ZombieWrites: true})
	nodeA := s.fencedDetachFailing()
	must(t, s.w.Cluster.Client().CoreV1().Nodes().Delete(s.ctx, nodeA, metav1.DeleteOptions{}))
	s.timeline.Add(time.Now(), "Node %s deleted by the operator", nodeA)

	var nodeB string
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a VolumeAttachment of the volume on another node", func(ctx context.Context) (bool, error) {
		p, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" || p.Spec.NodeName == nodeA {
			return false, nil
		}
		nodeB = p.Spec.NodeName
		return s.vaOf(ctx, nodeB) != "", nil
	}))
	s.timeline.Add(time.Now(), "db-0 scheduled to %s, its VolumeAttachment created", nodeB)
	// Held or refused by the array, the attach fails: judge which by the
	// calls the driver received.
	must(t, world.WaitFor(s.ctx, failoverTimeout, "an attachError on the VolumeAttachment of "+nodeB, func(ctx context.Context) (bool, error) {
		got, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(ctx, s.vaOf(ctx, nodeB), metav1.GetOptions{})
		return err == nil && got.Status.AttachError != nil, nil
	}))
	if n := audit.Count(s.audit(), audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(nodeB)); n != 0 {
		t.Fatalf("%d ControllerPublishVolume calls to %s while the fenced detach from %s has not succeeded", n, nodeB, nodeA)
	}
	s.waitClaimEvent(world.ClaimTemplate+"-db-0", "AttachHeld")

	must(t, s.w.SetDriverFaults(s.ctx))
	s.timeline.Add(time.Now(), "driver faults cleared")
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertPublishAfterFence(nodeA, moved.Spec.NodeName)
}

// assertPublishAfterFence checks that the db volume was unpublished from
// oldNode with fence=true and that no ControllerPublishVolume to newNode,
// not even a refused one, came before, then the failover invariant.
func (s *scenario) assertPublishAfterFence(oldNode, newNode string) {
	s.t.Helper()
	recs := s.audit()
	fence := s.fenceIndex(recs, oldNode)
	if fence < 0 {
		s.t.Fatalf("no successful fenced unpublish of %s from %s", s.handle, oldNode)
	}
	first := audit.FirstIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(newNode))
	if first < 0 {
		s.t.Fatalf("no ControllerPublishVolume of %s to %s in the audit log", s.handle, newNode)
	}
	if first < fence {
		s.t.Fatalf("ControllerPublishVolume to %s (record %d) was sent before the fenced unpublish from %s succeeded (record %d)", newNode, first, oldNode, fence)
	}
	s.assertInvariant(oldNode, newNode)
}
