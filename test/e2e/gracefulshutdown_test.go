package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/kubelet"
	"fenceline.io/fenceline/test/world"
)

// Graceful node shutdown (KEP-2000) with Fenceline. The kubelet stops its
// pods and unmounts their volumes within its shutdown grace periods, then
// the machine powers itself off. Nobody fences it: OpenShift's
// Pacemaker-based fencing, for one, fences on failures only. What is
// "safe" here, whoever fences or does not:
//
//   - the volume is never written from two nodes: the old node's last
//     accepted write comes before the new node's first, and the driver's
//     whole history keeps the single-writer invariant;
//   - the detach from the old node is fenced, or it is a plain unpublish
//     that came after the kubelet's own NodeUnstageVolume (invariant rule
//     fence-required, with the shutdown as the cut-off);
//   - no pod of the node is removed from the API while the kubelet was
//     shutting down unless the kubelet itself reported it stopped (Failed):
//     nothing is force-deleted under a live kubelet;
//   - the replacement runs on another node with its volume.
//
// What Fenceline does in its default configuration: with node fencing set
// up (a FencePolicy selecting the node), the stopped heartbeats make the
// node a fencing candidate like any other dead node (a shut-down node and
// a crashed one look the same from the control plane, and a shutdown can
// hang after its kubelet stopped), so it is fenced: the power-off of a
// machine that is already off, read back Off, then the out-of-service
// taint, which moves whatever the kubelet left behind with a fenced
// detach. Without node fencing, the kubelet's own clean-up is all there
// is: the volume moves with a plain detach once the kubelet reported it
// released, or stays where it is until the attach/detach controller's
// forced detach after 6 minutes (or an out-of-service taint), which the
// attacher fences because the node still lists the volume in use.

// shutdownTolerations are the not-ready and unreachable tolerations the
// API server's DefaultTolerationSeconds admission gives a pod: a kubelet's
// shutdown takes seconds, and taint eviction must not race it as it would
// with the scenarios' 2 s tolerations.
const shutdownTolerations = 300

// withDefaultPodTimings gives the StatefulSet's pods the timings a user's
// pods get by default: 300 s tolerations of a lost node, a 30 s
// terminationGracePeriodSeconds.
func withDefaultPodTimings(sts *appsv1.StatefulSet) {
	sts.Spec.Template.Spec.Tolerations = world.LostNodeTolerations(shutdownTolerations)
	sts.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
}

// podDeletion is a pod of the scenario removed from the API, as it was
// when removed.
type podDeletion struct {
	at  time.Time
	pod *corev1.Pod
}

// recordDeletions records every pod deletion in the scenario's namespace
// from now until the test ends.
func (s *scenario) recordDeletions() func() []podDeletion {
	s.t.Helper()
	var mu sync.Mutex
	var out []podDeletion
	stop := make(chan struct{})
	s.t.Cleanup(func() { close(stop) })
	inf := informers.NewSharedInformerFactoryWithOptions(s.w.Cluster.Client(), 0, informers.WithNamespace(s.ns)).Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*corev1.Pod); ok {
			mu.Lock()
			out = append(out, podDeletion{at: time.Now(), pod: p})
			mu.Unlock()
		}
	}})
	must(s.t, err)
	go inf.Run(stop)
	if !cache.WaitForCacheSync(s.ctx.Done(), inf.HasSynced) {
		s.t.Fatal("pod informer did not sync")
	}
	return func() []podDeletion {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// gracefulShutdown shuts node down gracefully with cfg and powers it off
// through powerOff, starting the clock of the failover, and records the
// kubelet's steps in the timeline.
func (s *scenario) gracefulShutdown(node string, cfg kubelet.ShutdownConfig, powerOff func(context.Context) error) kubelet.ShutdownReport {
	s.t.Helper()
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s shuts down gracefully (shutdownGracePeriod %s, critical pods %s; containers stop %s after SIGTERM)",
		node, cfg.GracePeriod, cfg.GracePeriodCriticalPods, cfg.StopTime)
	rep, err := s.w.GracefulShutdown(s.ctx, node, cfg, powerOff)
	s.timeline.Add(rep.Started, "kubelet of %s: Ready=False %q, Lease still renewed", node, kubelet.ShutdownReadyMessage)
	for _, p := range rep.Pods {
		if p.Stopped.IsZero() {
			s.timeline.Add(rep.Released, "kubelet of %s: pod %s still stopping when its grace %s ran out; nothing reported", node, p.Pod, p.Grace)
			continue
		}
		s.timeline.Add(p.Stopped, "kubelet of %s: pod %s stopped (SIGKILLed %t), reported Failed; volumes unpublished in time: %t", node, p.Pod, p.Killed, p.Unmounted)
	}
	s.timeline.Add(rep.Released, "kubelet of %s released its inhibitor lock", node)
	s.timeline.Add(rep.PoweredOff, "node %s powered off", node)
	must(s.t, err)
	return rep
}

// assertNothingForceDeletedWhileShuttingDown checks that no pod bound to
// node left the API before its power-off unless its kubelet had reported
// it stopped: any other was force-deleted under a live kubelet.
func (s *scenario) assertNothingForceDeletedWhileShuttingDown(deletions []podDeletion, node string, poweredOff time.Time) {
	s.t.Helper()
	for _, d := range deletions {
		p := d.pod
		if p.Spec.NodeName == node && d.at.Before(poweredOff) && !stoppedByKubelet(p) {
			s.t.Errorf("pod %s (%s) removed at %s while %s was shutting down (power-off at %s), not reported stopped by its kubelet",
				p.Name, p.Status.Phase, d.at.Format(time.StampMilli), node, poweredOff.Format(time.StampMilli))
		}
	}
}

// stoppedByKubelet reports whether p's status is its kubelet's report of
// it stopped: Succeeded, killed by the shutdown, or rejected by it (PodGC
// marks the pods it force-deletes Failed too, with other reasons).
func stoppedByKubelet(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		return true
	case corev1.PodFailed:
		return p.Status.Reason == kubelet.ShutdownPodReason || p.Status.Reason == kubelet.ShutdownRejectReason
	}
	return false
}

// assertWritesHandedOver checks in the driver's audit log that every write
// of oldNode the array accepted came before the first one it accepted from
// newNode, and that oldNode did write.
func (s *scenario) assertWritesHandedOver(oldNode, newNode string) {
	s.t.Helper()
	recs := s.audit()
	last := audit.LastIndex(recs, audit.Method("Write"), audit.Volume(s.handle), audit.Node(oldNode), audit.Effective())
	first := audit.FirstIndex(recs, audit.Method("Write"), audit.Volume(s.handle), audit.Node(newNode), audit.Effective())
	if last < 0 || first < 0 || last > first {
		s.t.Fatalf("audit log: last write of %s accepted at record %d, first of %s at record %d: want both, the old node's first", oldNode, last, newNode, first)
	}
}

// assertDetachSafe checks the detach of the db volume from node: fenced
// when wantFenced, else plain and only after the node's own unstage.
func (s *scenario) assertDetachSafe(node string, wantFenced bool) {
	s.t.Helper()
	recs := s.audit()
	since := audit.LastIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(node), audit.OK()) + 1
	unpub := audit.FirstIndex(recs[since:], audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(node), audit.Effective())
	if unpub < 0 {
		s.t.Fatalf("no unpublish of %s from %s in the audit log", s.handle, node)
	}
	r := recs[since+unpub]
	if r.Fence != wantFenced {
		s.t.Fatalf("the detach from %s was fence=%t, want %t", node, r.Fence, wantFenced)
	}
	if !r.Fence {
		if unstage := audit.FirstIndex(recs[since:], audit.Method("NodeUnstageVolume"), audit.Volume(s.handle), audit.Node(node), audit.OK()); unstage < 0 || unstage > unpub {
			s.t.Fatalf("plain unpublish from %s (record %d) before its kubelet unstaged the volume (record %d)", node, since+unpub, since+unstage)
		}
	}
}

// TestGracefulShutdownWithNodeFencing: node A, running db-0, shuts down
// gracefully and powers itself off; its BMC reads Off. Nobody else fences
// it. Node fencing sees the silent Lease, reads the BMC Off at the first
// missed renewal and fences A (its power-off is a no-op, read back Off),
// and the out-of-service taint moves whatever the kubelet left behind
// with a fenced detach: in both variants the attach/detach controller
// could not detach before, because A's last status update still listed
// the volume in use. Either the kubelet stopped db-0 in time (reported it
// Failed with the shutdown's reason, unmounted its volume, and the
// StatefulSet replaced it), or the grace was too short (the kubelet gave
// up, db-0 stayed Running on the dead node with its volume published,
// and was force-deleted only after the fence). A is then powered on
// through its BMC and unfenced; the storage holds no fence of it.
func TestGracefulShutdownWithNodeFencing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  kubelet.ShutdownConfig
		// stopped: the kubelet stops db-0 within the grace.
		stopped bool
	}{
		{name: "stopped in time", cfg: kubelet.ShutdownConfig{GracePeriod: 4 * time.Second, GracePeriodCriticalPods: time.Second, StopTime: 500 * time.Millisecond}, stopped: true},
		{name: "grace too short", cfg: kubelet.ShutdownConfig{GracePeriod: 3 * time.Second, GracePeriodCriticalPods: time.Second, StopTime: 20 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFencingScenario(t, world.BMCRedfish, nil)
			s.editSTS = withDefaultPodTimings
			nodeA := s.startDB().Spec.NodeName
			deletions := s.recordDeletions()
			bmc := s.setup.BMCs[nodeA]

			rep := s.gracefulShutdown(nodeA, tc.cfg, bmc.PowerLoss)
			if len(rep.Pods) != 1 || rep.Pods[0].Pod.Name != "db-0" {
				t.Fatalf("the shutdown killed %+v, want db-0", rep.Pods)
			}
			if stopped := !rep.Pods[0].Stopped.IsZero() && rep.Pods[0].Unmounted; stopped != tc.stopped {
				t.Fatalf("db-0 stopped and unmounted by the kubelet: %t, want %t (%+v)", stopped, tc.stopped, rep.Pods[0])
			}
			s.assertOldPod(nodeA, deletions, tc.stopped, rep.PoweredOff)
			if n, _ := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{}); n == nil ||
				!slices.Contains(n.Status.VolumesInUse, s.volumeName()) {
				t.Fatalf("%s's volumesInUse after the power-off no longer lists the volume: its last status update was not the kubelet's default", nodeA)
			}

			req, err := s.setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
			must(t, err)
			seenFenced := time.Now()
			s.timeline.Add(seenFenced, "FencingRequest %s seen Fenced (%s)", req.Name, req.Spec.Reason)
			if req.Spec.Reason != detect.ReasonPowerOffObserved {
				t.Fatalf("request %s reason %q, want %s: a shut-down node's BMC reads Off at its first missed renewal", req.Name, req.Spec.Reason, detect.ReasonPowerOffObserved)
			}
			checkProof(t, req, bmc)
			moved := s.assertMovedFenced(nodeA, seenFenced)
			nodeB := moved.Spec.NodeName
			s.assertDetachSafe(nodeA, true)
			s.assertWritesHandedOver(nodeA, nodeB)
			s.assertNeverTwoWriters()
			s.assertNothingForceDeletedWhileShuttingDown(deletions(), nodeA, rep.PoweredOff)
			if n := len(mustRequests(t, s, nodeA)); n != 1 {
				t.Fatalf("%d FencingRequests for %s, want 1", n, nodeA)
			}

			// Back on through its BMC (a new boot ID), unfenced; the
			// storage keeps no fence of A: either A had cleaned up before
			// the fenced detach came, or its clean-up after the boot
			// lifted the fence.
			rec := s.powerOnUnfenced(nodeA)
			if rec.UID != req.UID {
				t.Fatalf("request %s Recovered, want %s (the one that fenced)", rec.Name, req.Name)
			}
			must(t, world.WaitFor(s.ctx, failoverTimeout, "no storage fence of "+nodeA, func(context.Context) (bool, error) {
				return s.storageFences(nodeA) == 0, nil
			}))
			if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || p == nil || p.Spec.NodeName != nodeB {
				t.Fatalf("after %s came back, db-0 = %v (err %v), want Running on %s", nodeA, p, err, nodeB)
			}
		})
	}
}

// assertOldPod checks what became of db-0 on node after the shutdown:
// stopped, it was reported Failed by its kubelet with the shutdown's
// reason, message and DisruptionTarget condition, and the StatefulSet
// removed it (a terminal pod's deletion is immediate) before the power-off
// or soon after; not stopped, it is still Running on the node, as the
// kubelet never reported anything more.
func (s *scenario) assertOldPod(node string, deletions func() []podDeletion, stopped bool, poweredOff time.Time) {
	s.t.Helper()
	if !stopped {
		p, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(s.ctx, "db-0", metav1.GetOptions{})
		must(s.t, err)
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning {
			s.t.Fatalf("db-0 after a shutdown that gave up on it: %s on %s, want Running on %s", p.Status.Phase, p.Spec.NodeName, node)
		}
		if n := audit.Count(s.audit(), audit.Method("NodeUnpublishVolume"), audit.Volume(s.handle), audit.Node(node)); n != 0 {
			s.t.Fatalf("%d NodeUnpublishVolume calls from %s although its kubelet gave up on db-0", n, node)
		}
		return
	}
	var old *corev1.Pod
	must(s.t, world.WaitFor(s.ctx, startTimeout, "db-0 removed from "+node, func(context.Context) (bool, error) {
		for _, d := range deletions() {
			if d.pod.Name == "db-0" && d.pod.Spec.NodeName == node {
				old = d.pod
				return true, nil
			}
		}
		return false, nil
	}))
	disrupted := slices.ContainsFunc(old.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet
	})
	if old.Status.Phase != corev1.PodFailed || old.Status.Reason != kubelet.ShutdownPodReason || old.Status.Message != kubelet.ShutdownPodMessage || !disrupted {
		s.t.Fatalf("db-0 removed from %s as %s, reason %q, message %q, DisruptionTarget %t: want Failed by the kubelet's shutdown",
			node, old.Status.Phase, old.Status.Reason, old.Status.Message, disrupted)
	}
}

// volumeName is the db volume's name in node status.
func (s *scenario) volumeName() corev1.UniqueVolumeName {
	return nodeutil.CSIUniqueVolumeName(world.DriverName, s.handle)
}

// TestGracefulShutdownWithoutNodeFencing: the same shutdown where nothing
// fences node A (Fenceline's node fencing is not set up; another fencer,
// such as Pacemaker, would not fence a graceful shutdown either). The
// kubelet stops db-0 in time and unmounts its volume. If its last status
// update made it out, volumesInUse no longer lists the volume and the
// attach/detach controller detaches at once: a plain unpublish (no fence
// reason, and none needed after the node's own NodeUnstageVolume), and
// db-0 runs on another node. If it did not (the kubelet's defaults), the
// volume stays attached to the dead node: the attach/detach controller
// holds the replacement's attach (a Multi-Attach Warning), nothing
// detaches it, until the controller's forced detach after its 6-minute
// unmount wait (here: the VolumeAttachment deleted as that detach deletes
// it). The attacher fences that detach, the node still listing the
// volume in use, and db-0 moves. Nothing puts A out of service.
func TestGracefulShutdownWithoutNodeFencing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reported bool
	}{
		{name: "last status update made", reported: true},
		{name: "last status update not made", reported: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The attach/detach controller notices a VolumeAttachment gone
			// behind its back at its reconcile sync (1 minute by default).
			s := newScenario(t, world.Options{Cluster: cluster.Options{ExtraControllerManagerArgs: []string{"--attach-detach-reconcile-sync-period=5s"}}})
			s.editSTS = withDefaultPodTimings
			nodeA := s.startDB().Spec.NodeName
			deletions := s.recordDeletions()

			rep := s.gracefulShutdown(nodeA, kubelet.ShutdownConfig{
				GracePeriod: 4 * time.Second, GracePeriodCriticalPods: time.Second, StopTime: 500 * time.Millisecond, ReportReleased: tc.reported,
			}, nil)
			if len(rep.Pods) != 1 || rep.Pods[0].Stopped.IsZero() || !rep.Pods[0].Unmounted {
				t.Fatalf("the kubelet did not stop db-0 in time: %+v", rep.Pods)
			}
			s.assertOldPod(nodeA, deletions, true, rep.PoweredOff)

			if !tc.reported {
				s.waitMultiAttachHeld(nodeA)
				recs := s.audit()
				if n := audit.Count(recs, audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(nodeA)); n != 0 {
					t.Fatalf("%d unpublishes from %s while it still lists the volume in use and nobody forced a detach", n, nodeA)
				}
				va := s.attachment(nodeA)
				s.timeline.Add(time.Now(), "VolumeAttachment %s deleted, as the attach/detach controller's forced detach does after 6 minutes", va.Name)
				must(t, s.w.Cluster.Client().StorageV1().VolumeAttachments().Delete(s.ctx, va.Name, metav1.DeleteOptions{}))
			}
			moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
			must(t, err)
			nodeB := moved.Spec.NodeName
			s.timeline.Add(time.Now(), "db-0 Running on %s", nodeB)
			s.waitAcceptedWrite(nodeB, time.Now())
			// Reported released, no fence reason: plain. Still in use: the
			// forced detach is fenced (reason in-use).
			s.assertDetachSafe(nodeA, !tc.reported)
			s.assertInvariant(nodeA, nodeB)
			s.assertWritesHandedOver(nodeA, nodeB)
			s.assertNeverTwoWriters()
			s.assertNothingForceDeletedWhileShuttingDown(deletions(), nodeA, rep.PoweredOff)
			for _, taint := range []string{names.OutOfServiceTaint, names.QuarantineTaint, names.ForceEvictionTaint} {
				if has, err := s.w.HasTaint(s.ctx, nodeA, taint); err != nil || has {
					t.Errorf("%s tainted %s (err %v): nothing should have cut it off", nodeA, taint, err)
				}
			}

			// Back on: the replacement is undisturbed, and the storage holds
			// no fence of A once its kubelet has cleaned up.
			must(t, s.w.PowerOn(s.ctx, nodeA))
			must(t, world.WaitFor(s.ctx, failoverTimeout, "no storage fence of "+nodeA, func(context.Context) (bool, error) {
				return s.storageFences(nodeA) == 0, nil
			}))
			if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || p == nil || p.Spec.NodeName != nodeB {
				t.Fatalf("after %s came back, db-0 = %v (err %v), want Running on %s", nodeA, p, err, nodeB)
			}
		})
	}
}

// waitMultiAttachHeld waits for the attach/detach controller's Warning
// that it holds the attach of the replacement db-0, on another node than
// node: the volume is still attached to node.
func (s *scenario) waitMultiAttachHeld(node string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "a Multi-Attach Warning on the replacement db-0", func(ctx context.Context) (bool, error) {
		p, err := s.w.Cluster.Client().CoreV1().Pods(s.ns).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" || p.Spec.NodeName == node {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		selector := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)),
			fields.OneTermEqualSelector("reason", "FailedAttachVolume")).String()
		evs, err := s.w.Cluster.Client().CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling until the deadline
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning {
				s.timeline.Add(time.Now(), "Warning on db-0 (%s): %s", p.Spec.NodeName, e.Message)
				return true, nil
			}
		}
		return false, nil
	}))
}
