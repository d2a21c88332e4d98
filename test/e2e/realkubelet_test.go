package e2e

import (
	"context"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/realkubelet"
	"fenceline.io/fenceline/test/world"
)

// TestNonGracefulShutdownOnRealKubelet is KEP-2268 with Fenceline on a
// node run by the real upstream kubelet: its pod's container keeps writing
// through its volume after the power cut (a zombie), the operator's
// out-of-service taint moves the pod to a KWOK node with the volume fenced
// off first, and none of the old node's later writes is accepted. The node
// then boots with a new boot ID; the real kubelet finds the volume it had
// staged, sees its pod gone and cleans up without force, which lifts the
// fence; the operator removes the taint.
func TestNonGracefulShutdownOnRealKubelet(t *testing.T) {
	t.Parallel()
	realkubelet.Require(t)
	const real = "real-a"
	s := newScenario(t, world.Options{ZombieWrites: true, Nodes: []string{"node-a", "node-b"}, RealKubelets: []string{real}})
	s.pinTo = real
	s.startDB()

	s.powerOff(real)
	moved := s.outOfService(real)
	s.assertFencedBeforePublish(real, moved.Spec.NodeName)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())

	boot, err := s.w.Cluster.BootID(s.ctx, real)
	must(t, err)
	must(t, s.w.PowerOn(s.ctx, real))
	if again, err := s.w.Cluster.BootID(s.ctx, real); err != nil || again == boot {
		t.Fatalf("boot ID of %s after the power cycle = %q (err %v), want a new one (was %q)", real, again, err, boot)
	}
	s.waitNodeCleanedUp(real)
	if n := audit.Count(s.audit(), audit.Node(real), audit.Forced()); n != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls; upstream never does", n)
	}
	must(t, s.w.RemoveTaint(s.ctx, real, world.OutOfServiceTaint.Key))
	if p, err := s.w.RunningPod(s.ctx, s.ns, "db-0"); err != nil || p == nil || p.Spec.NodeName != moved.Spec.NodeName {
		t.Fatalf("after %s came back, db-0 = %v (err %v), want Running on %s", real, p, err, moved.Spec.NodeName)
	}
}

// TestSafeDetachPartitionOnRealKubelet: a safe-detach driver's pod runs on
// a real-kubelet node whose kubelet freezes (a partition from the control
// plane: its container writes on). With no human, quarantine force-deletes
// the pod, the volume is fenced off the node before it moves to a KWOK
// node, and the frozen node's writes are refused. When the kubelet
// resumes, it finds its pod gone, stops the container and cleans up
// without force, and only then is the quarantine lifted.
func TestSafeDetachPartitionOnRealKubelet(t *testing.T) {
	t.Parallel()
	realkubelet.Require(t)
	const real = "real-a"
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		Nodes:          []string{"node-a", "node-b"},
		RealKubelets:   []string{real},
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=2s"},
	})
	s.pinTo = real
	s.startDB()

	s.t0 = time.Now()
	s.timeline.Add(s.t0, "kubelet of %s frozen", real)
	must(t, s.w.Partition(s.ctx, real))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", real, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(real, moved.Spec.NodeName)

	must(t, s.w.PartitionHeal(s.ctx, real))
	s.timeline.Add(time.Now(), "kubelet of %s resumed", real)
	s.waitNodeCleanedUp(real)
	var lifted time.Time
	must(t, world.WaitFor(s.ctx, failoverTimeout, "quarantine lifted from "+real, func(ctx context.Context) (bool, error) {
		q, err := s.w.HasTaint(ctx, real, names.QuarantineTaint)
		if err == nil && !q {
			lifted = time.Now()
		}
		return err == nil && !q, nil
	}))
	recs := s.audit()
	if n := audit.Count(recs, audit.Node(real), audit.Forced()); n != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls; upstream never does", n)
	}
	i := audit.FirstIndex(recs, audit.Method("NodeUnstageVolume"), audit.Node(real), audit.Volume(s.handle), audit.OK())
	if recs[i].Time.After(lifted) {
		t.Fatalf("quarantine of %s lifted at %s, before the kubelet's clean-up at %s", real, lifted.Format(time.RFC3339Nano), recs[i].Time.Format(time.RFC3339Nano))
	}
}

// TestNodeFencingOnRealKubelet is node fencing with no human on a
// real-kubelet node: its kubelet freezes while its container writes on;
// node-fencing powers it off through its BMC (the kubelet and runtime
// die), reads Off back, puts it out of service, and the pod moves with its
// volume fenced off first. Powered on through its BMC, the node boots
// with a new boot ID, the real kubelet cleans up the volume it finds
// without force, and the node is unfenced.
func TestNodeFencingOnRealKubelet(t *testing.T) {
	t.Parallel()
	realkubelet.Require(t)
	const real = "real-a"
	s := newFencingScenarioWith(t, world.Options{Nodes: []string{"node-a", "node-b"}, RealKubelets: []string{real}}, world.BMCRedfish, nil)
	s.pinTo = real
	s.startDB()
	req := s.fenceAndMove(real)
	rec := s.powerOnUnfenced(real)
	if rec.UID != req.UID {
		t.Fatalf("request %s Recovered, want %s (the one that fenced)", rec.Name, req.Name)
	}
	if n := audit.Count(s.audit(), audit.Node(real), audit.Forced()); n != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls; upstream never does", n)
	}
}

// TestForceEvictionNodeReturnsOnRealKubelet is the force-eviction story
// of TestForceEvictionNodeReturnsDuringDetach on a real-kubelet node: its
// kubelet freezes, the operator's force-eviction taint has db-0
// force-deleted, the fenced detach keeps failing while the kubelet
// resumes and a new pod is bound to the node, and the taint stays until
// the fenced detach goes through. The returning kubelet, which finds its
// pod gone, stops the container and cleans up the volume without force;
// the pod bound after its return is left to it (and to the taint manager)
// and not force-deleted.
func TestForceEvictionNodeReturnsOnRealKubelet(t *testing.T) {
	t.Parallel()
	realkubelet.Require(t)
	const real = "real-a"
	s := newScenario(t, world.Options{ZombieWrites: true, Nodes: []string{"node-a", "node-b"}, RealKubelets: []string{real}})
	s.pinTo = real
	s.forceEvictionNodeReturns(s.startDB())
	s.waitNodeCleanedUp(real)
	if n := audit.Count(s.audit(), audit.Node(real), audit.Forced()); n != 0 {
		t.Fatalf("the real kubelet sent %d forced node calls; upstream never does", n)
	}
}

// TestAttacherDownAcrossHealOnRealKubelet is the fence-intent story on a
// real-kubelet node: its kubelet freezes, fenceline-attacher is down while
// quarantine releases the volume, the kubelet resumes with the volume still
// staged (its clean-up fails, a process holds the volume open and writes),
// and the attacher, back, must still unpublish with fence=true.
func TestAttacherDownAcrossHealOnRealKubelet(t *testing.T) {
	t.Parallel()
	realkubelet.Require(t)
	s := newScenario(t, world.Options{
		ZombieWrites:   true,
		HeldOpen:       true,
		Nodes:          []string{"node-a", "node-b"},
		RealKubelets:   []string{"real-a"},
		Driver:         world.DriverOptions{SafeDetach: true},
		ControllerArgs: []string{"--quarantine-delay=2s"},
	})
	s.pinTo = "real-a"
	s.attacherDownAcrossHeal(func(string) {}, func(string) {})
}
