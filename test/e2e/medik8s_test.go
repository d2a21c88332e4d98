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
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

// snrSafeTime stands in for SNR's safeTimeToAssumeNodeRebootedSeconds
// (about 180 s by default), shortened: what matters here is what happens
// after it, not its length.
const snrSafeTime = 3 * time.Second

// snrOutOfServiceExpiry is SNR's OutOfServiceTimeoutDuration: it removes
// the out-of-service taint this long after timeAssumedRebooted even when
// pods or VolumeAttachments of the node remain.
const snrOutOfServiceExpiry = time.Minute

// medik8sWorld starts the scenario with Fenceline's shipped defaults (no
// node fencing, no out-of-service taint removal) and kube-apiserver's audit
// log, which tells who wrote the node.
func medik8sWorld(t *testing.T) *scenario {
	t.Helper()
	return newScenario(t, world.Options{ZombieWrites: true, Cluster: cluster.Options{AuditLog: true}})
}

// TestMedik8sFenceAgentsRemediation: node A hangs while its pod writes to
// an RWO volume (it keeps writing: the power-off below does not stop the
// writer, as when a fence agent reports success too early). A stand-in for
// NodeHealthCheck plus Fence Agents Remediation with the OutOfServiceTaint
// strategy follows medik8s's flow exactly: its NoSchedule taint, a
// power-off through the node's BMC read back Off, the out-of-service
// taint, a wait for no terminating pod and no VolumeAttachment on the node,
// then (FAR's reboot: power on, Ready, NHC deletes the CR) both taints
// removed. Fenceline runs with its shipped defaults beside it. Proves:
// db-0 runs on another node with its volume attached; the detach from A
// was fenced before the publish elsewhere and none of A's later writes was
// accepted; never two writers; only the remediator removed its taints and
// Fenceline never wrote the node; nothing of Fenceline's is left on A.
func TestMedik8sFenceAgentsRemediation(t *testing.T) {
	t.Parallel()
	s := medik8sWorld(t)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	bmc, err := s.w.StartBMC(s.ctx, nodeA, world.BMCRedfish, world.WithTimeline(s.timeline))
	must(t, err)
	t.Cleanup(bmc.Close)
	dev, err := bmc.Device()
	must(t, err)
	far := newRemediator(s, nodeA, farTaintKey)
	history, err := watchTaintRemovals(s.ctx, s.w.Cluster.Client(), nodeA)
	must(t, err)

	// The node hangs; NHC sees Ready=Unknown and creates a FAR CR.
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s hangs (partitioned, keeps writing)", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))

	far.startRemediation()
	far.powerOff(dev)
	far.outOfService()
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	must(t, world.WaitFor(s.ctx, failoverTimeout, "no terminating pod and no VolumeAttachment on "+nodeA, far.resourcesGone))

	// FAR's reboot brings the node back; NHC sees it healthy and deletes
	// the CR; FAR removes its taints.
	must(t, dev.On(s.ctx))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionTrue, failoverTimeout))
	s.timeline.Add(time.Now(), "node %s Ready after the BMC's power-on", nodeA)
	far.finish()

	s.assertReplacementAttached(moved.Spec.NodeName)
	s.assertNeverTwoWriters()
	far.assertOnlyRemediatorRemoved(history)
	s.assertFencelineLeftNodeAlone(nodeA)
	s.assertNothingOfFencelineOn(nodeA)
}

// TestMedik8sSelfNodeRemediationExpiry: Self Node Remediation assumes node
// A rebooted once its safe time is over, but A only hung and never
// rebooted (it keeps writing). The stand-in follows SNR's
// OutOfServiceTaint strategy: its NoSchedule taint, the out-of-service
// taint at timeAssumedRebooted, and, after A comes back (same boot ID) and
// NHC deletes the CR, the removal of both taints at timeAssumedRebooted + 1
// minute although db-0's VolumeAttachment to A is still there (the
// driver fails the unpublish meanwhile). Proves that Fenceline's fence
// record keeps that detach fenced after the taint is gone and A is Ready
// (upstream would now detach plain): no plain unpublish from A, never two
// writers, db-0 runs elsewhere with its volume once the driver answers,
// and Fenceline never touched the taints.
func TestMedik8sSelfNodeRemediationExpiry(t *testing.T) {
	t.Parallel()
	s := medik8sWorld(t)
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	snr := newRemediator(s, nodeA, snrTaintKey)
	history, err := watchTaintRemovals(s.ctx, s.w.Cluster.Client(), nodeA)
	must(t, err)
	must(t, s.w.SetDriverFaults(s.ctx, faults.FailNext("ControllerUnpublishVolume", 1000, codes.Unavailable)))

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s hangs (partitioned, keeps writing)", nodeA)
	must(t, s.w.Partition(s.ctx, nodeA))
	must(t, s.w.Cluster.WaitNodeReady(s.ctx, nodeA, corev1.ConditionUnknown, nodeLostTimeout))
	snr.startRemediation()
	assumed := time.Now().Add(snrSafeTime)
	s.waitUntil(assumed, "timeAssumedRebooted")
	snr.outOfService()

	failedFence := func(after time.Time) int { return s.failedFencedUnpublishes(nodeA, after) }
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a failed fenced unpublish from "+nodeA, func(context.Context) (bool, error) {
		return failedFence(time.Time{}) > 0, nil
	}))

	// A was never rebooted: it comes back with its old boot ID, NHC sees
	// it healthy and deletes the CR; the resources are not gone, so SNR
	// waits for its expiry and then removes the taints anyway.
	must(t, s.w.PartitionHeal(s.ctx, nodeA))
	s.timeline.Add(time.Now(), "node %s back (same boot ID)", nodeA)
	s.waitUntil(assumed.Add(snrOutOfServiceExpiry), "SNR's out-of-service expiry")
	if s.vaOf(s.ctx, nodeA) == "" {
		t.Fatalf("setup: no VolumeAttachment of %s to %s at the expiry", s.handle, nodeA)
	}
	snr.finish()
	removed := time.Now()

	// Detach attempts after the taint went, on a Ready node, stay fenced.
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a failed fenced unpublish after the taint's removal", func(context.Context) (bool, error) {
		return failedFence(removed) > 0, nil
	}))
	must(t, s.w.SetDriverFaults(s.ctx))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertReplacementAttached(moved.Spec.NodeName)
	if n := audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA), func(r audit.Record) bool { return !r.Fence }); n != 0 {
		t.Fatalf("%d plain ControllerUnpublishVolume calls from %s; every one must be fenced", n, nodeA)
	}
	s.assertInvariant(nodeA, moved.Spec.NodeName)
	s.assertNeverTwoWriters()
	snr.assertOnlyRemediatorRemoved(history)
	s.assertFencelineLeftNodeAlone(nodeA)
	s.assertNothingOfFencelineOn(nodeA)
}

// waitUntil waits (with the scenario's deadline) until the wall clock
// passes at, a point a medik8s remediator acts on.
func (s *scenario) waitUntil(at time.Time, what string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, time.Until(at)+failoverTimeout, what, func(context.Context) (bool, error) {
		return time.Now().After(at), nil
	}))
	s.timeline.Add(time.Now(), "%s reached", what)
}

// assertReplacementAttached checks that db-0 is Running on node and its
// volume's VolumeAttachment to node is attached.
func (s *scenario) assertReplacementAttached(node string) {
	s.t.Helper()
	p, err := s.w.RunningPod(s.ctx, s.ns, "db-0")
	must(s.t, err)
	if p == nil || p.Spec.NodeName != node {
		s.t.Fatalf("db-0 = %v, want Running on %s", p, node)
	}
	name := s.vaOf(s.ctx, node)
	if name == "" {
		s.t.Fatalf("no VolumeAttachment of %s to %s", s.handle, node)
	}
	va, err := s.w.Cluster.Client().StorageV1().VolumeAttachments().Get(s.ctx, name, metav1.GetOptions{})
	must(s.t, err)
	if !va.Status.Attached {
		s.t.Fatalf("VolumeAttachment %s of %s to %s is not attached", name, s.handle, node)
	}
}

// assertNeverTwoWriters judges the driver's whole audit log with
// invariant.CheckHistory: the db volume never had two writers.
func (s *scenario) assertNeverTwoWriters() {
	s.t.Helper()
	if v := invariant.CheckHistory(s.audit(), func(vol string) bool { return vol == s.handle }); len(v) != 0 {
		s.t.Fatalf("audit log breaks the single-writer history: %v", v)
	}
}

// failedFencedUnpublishes counts the fenced ControllerUnpublishVolume
// calls of the db volume from node that the driver failed with
// Unavailable after the time given.
func (s *scenario) failedFencedUnpublishes(node string, after time.Time) int {
	return audit.Count(s.audit(), audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(node),
		audit.Fenced(), audit.Code("Unavailable"), func(r audit.Record) bool { return r.Time.After(after) })
}
