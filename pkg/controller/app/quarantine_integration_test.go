package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

const (
	safeDriver  = "safe.fenceline.io"
	plainDriver = "plain.fenceline.io"
	// testDelay stands in for --quarantine-delay; short enough for tests,
	// long enough to observe that nothing happens before it.
	testDelay = 2 * time.Second
)

// volume creates a bound PVC/PV pair of the driver and returns the PVC
// name and the volume's unique name in node status.
func (e *env) volume(name, driver string, mode v1.PersistentVolumeAccessMode) (string, v1.UniqueVolumeName) {
	e.t.Helper()
	pv := testobj.CSIPV("pv-"+name, driver, "handle-"+name, mode)
	pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: ns, Name: name}
	if _, err := e.admin.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating PV: %v", err)
	}
	pvc := testobj.PVC(ns, name, pv.Name)
	pvc.Spec.AccessModes = []v1.PersistentVolumeAccessMode{mode}
	if _, err := e.admin.CoreV1().PersistentVolumeClaims(ns).Create(e.ctx, pvc, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating PVC: %v", err)
	}
	return name, nodeutil.CSIUniqueVolumeName(driver, "handle-"+name)
}

// heartbeat writes the heartbeat Lease of the driver's fenceline-attacher
// as pkg/attacher/heartbeat does (label, exact driver name, UNPUBLISH_FENCE
// "true", testobj.HeartbeatDuration unless opts say otherwise), last renewed
// at renew, in the namespace the attacher is deployed to, and renews it
// every second until the test ends, as a running attacher does. Quarantine
// acts for a safe-detach driver only while it sees one fresh: renewed, on
// its own clock, within leaseDurationSeconds (a Lease it only found in its
// first list is no evidence until it sees a renewal).
func (e *env) heartbeat(driver string, renew time.Time, opts ...testobj.HeartbeatOption) *coordinationv1.Lease {
	e.t.Helper()
	l := e.staleHeartbeat(driver, renew, opts...)
	go func() {
		leases := e.admin.CoordinationV1().Leases(world.Namespace)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-e.ctx.Done():
				return
			case <-tick.C:
			}
			cur, err := leases.Get(e.ctx, l.Name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			cur.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, _ = leases.Update(e.ctx, cur, metav1.UpdateOptions{}) // a failed renewal is retried at the next tick
		}
	}()
	return l
}

// staleHeartbeat writes the heartbeat Lease as heartbeat does, and never
// renews it: an attacher that stopped.
func (e *env) staleHeartbeat(driver string, renew time.Time, opts ...testobj.HeartbeatOption) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.admin.CoordinationV1().Leases(world.Namespace).Create(e.ctx, testobj.Heartbeat(world.Namespace, driver, renew, opts...), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating the heartbeat Lease of %s: %v", driver, err)
	}
	return l
}

// safeDetachDriver creates a CSIDriver annotated safe-detach, with
// attachRequired as given.
func (e *env) safeDetachDriver(name string, attachRequired bool) {
	e.t.Helper()
	d := testobj.AttachRequired(testobj.CSIDriver(name, map[string]string{names.SafeDetachAnnotation: "true"}), attachRequired)
	if _, err := e.admin.StorageV1().CSIDrivers().Create(e.ctx, d, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating CSIDriver %s: %v", name, err)
	}
}

func (e *env) createVA(name, driver, pv, node string) *storagev1.VolumeAttachment {
	e.t.Helper()
	va, err := e.admin.StorageV1().VolumeAttachments().Create(e.ctx, testobj.VA(name, driver, pv, node), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating VolumeAttachment: %v", err)
	}
	return va
}

// quarantineBarrier proves the quarantine queue handled everything enqueued
// before it, with a fresh node whose safe-detach pod must be deleted.
func (e *env) quarantineBarrier() {
	e.t.Helper()
	name := fmt.Sprintf("qb-%d", time.Now().UnixNano())
	claim, _ := e.volume(name, safeDriver, v1.ReadWriteOnce)
	e.createNode(name, false)
	e.waitPodGone(e.createStuckPod(name, name, testobj.Claim("data", claim)))
}

// liftBarrier is a faster quarantine barrier (no quarantine delay): a fresh
// node, Ready for a minute, quarantined with nothing left to wait for, must
// lose the taint.
func (e *env) liftBarrier() {
	e.t.Helper()
	name := fmt.Sprintf("lb-%d", time.Now().UnixNano())
	e.createNode(name, true)
	e.updateNode(name, true, func(n *v1.Node) { testobj.ReadySince(time.Now().Add(-time.Minute))(n) })
	e.addTaint(name, names.QuarantineTaint, v1.TaintEffectNoSchedule)
	e.waitTaint(name, names.QuarantineTaint, false)
}

// blip plays a kubelet that misses a few heartbeats: NotReady now, and
// Ready again once the quarantine queue has looked at the NotReady node,
// well within the quarantine delay.
func (e *env) blip(node string) {
	e.t.Helper()
	start := time.Now()
	e.setReady(node, false)
	e.liftBarrier()
	e.setReady(node, true)
	if d := time.Since(start); d >= testDelay {
		e.t.Fatalf("blip took %s, not shorter than the %s quarantine delay", d, testDelay)
	}
}

func TestQuarantineIntegration(t *testing.T) {
	opts := testOptions(quarantine.Name)
	opts.Settings[quarantine.Name].(*quarantine.Settings).Delay = testDelay
	opts.Settings[quarantine.Name].(*quarantine.Settings).LiftDelay = time.Second
	opts.Resync = time.Second // exercise "one Event, not one per resync"
	e := startEnv(t, opts)
	e.safeDetachDriver(safeDriver, true)
	e.heartbeat(safeDriver, time.Now())
	if _, err := e.admin.StorageV1().CSIDrivers().Create(e.ctx, testobj.CSIDriver(plainDriver, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("safe-detach pod: taint, force-delete, release volume, lift once Ready and detached", func(t *testing.T) {
		claim, unique := e.volume("q1", safeDriver, v1.ReadWriteOnce)
		other, otherUnique := e.volume("q1-other", safeDriver, v1.ReadWriteOnce)
		start := time.Now()
		e.createNode("q-1", false, testobj.VolumesInUse(unique, otherUnique))
		p := e.createStuckPod("q-1-a", "q-1", testobj.Claim("data", claim), testobj.EmptyDir("tmp"))
		// A live pod on the node still uses the other volume: it must stay in use.
		e.createPod("q-1-live", "q-1", testobj.Claim("data", other))
		va := e.createVA("va-q1", safeDriver, "pv-q1", "q-1")

		e.waitTaint("q-1", names.QuarantineTaint, true)
		if d := time.Since(start); d < testDelay-time.Second {
			t.Errorf("node quarantined after %s, before the %s delay", d, testDelay)
		}
		e.waitPodGone(p)
		ev := e.waitEvent("Pod", ns, p.Name, p.UID, actuator.EventForceDeleted)
		if !strings.Contains(ev.Message, "safe-detach") {
			t.Errorf("event %q does not say why", ev.Message)
		}
		e.waitEvent("Node", "", "q-1", "", actuator.EventTainted)
		e.waitFor("volume released from volumesInUse", func(ctx context.Context) (bool, error) {
			n := e.node("q-1")
			return !slices.Contains(n.Status.VolumesInUse, unique), nil
		})
		if n := e.node("q-1"); !slices.Contains(n.Status.VolumesInUse, otherUnique) {
			t.Errorf("volume of a live pod was released: volumesInUse = %v", n.Status.VolumesInUse)
		}
		if got := e.metricValue("fenceline_controller_quarantined_nodes"); got < 1 {
			t.Errorf("quarantined_nodes = %v, want >= 1", got)
		}
		if got := e.metricValue("fenceline_controller_quarantined_since_timestamp_seconds", "q-1"); got < float64(start.Unix()) || got > float64(time.Now().UnixNano())/1e9 {
			t.Errorf("q-1 quarantined since %v, want between the test's start %d and now", got, start.Unix())
		}
		if got := e.metricValue("fenceline_controller_force_delete_latency_seconds", "safe-detach"); got < 1 {
			t.Errorf("latency histogram has %v samples, want >= 1", got)
		}

		// Back: Ready; the returning kubelet still lists the fenced volume
		// until its node-side clean-up, and a VolumeAttachment remains.
		e.updateNode("q-1", true, func(n *v1.Node) {
			testobj.ReadySince(time.Now())(n)
			n.Status.VolumesInUse = []v1.UniqueVolumeName{unique, otherUnique}
		})
		e.quarantineBarrier()
		if !nodeutil.HasTaint(e.node("q-1"), names.QuarantineTaint) {
			t.Fatal("quarantine lifted while a safe-detach VolumeAttachment remains")
		}
		if err := e.admin.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.quarantineBarrier()
		if !nodeutil.HasTaint(e.node("q-1"), names.QuarantineTaint) {
			t.Fatal("quarantine lifted before the kubelet cleaned up the fenced volume")
		}
		// Clean-up done: only the live pod's volume is left in use.
		e.updateNode("q-1", true, func(n *v1.Node) { n.Status.VolumesInUse = []v1.UniqueVolumeName{otherUnique} })
		e.waitTaint("q-1", names.QuarantineTaint, false)
		e.waitEvent("Node", "", "q-1", "", actuator.EventUntainted)
	})

	t.Run("pods that are not safe are left alone with one Event", func(t *testing.T) {
		e.createNode("q-2", false)
		safe, _ := e.volume("q2-safe", safeDriver, v1.ReadWriteOnce)
		plain, _ := e.volume("q2-plain", plainDriver, v1.ReadWriteOnce)
		rwx, _ := e.volume("q2-rwx", safeDriver, v1.ReadWriteMany)
		cases := []struct {
			pod  *v1.Pod
			want string
		}{
			{e.createStuckPod("q-2-mixed", "q-2", testobj.Claim("a", safe), testobj.Claim("b", plain)), "not annotated"},
			{e.createStuckPod("q-2-rwx", "q-2", testobj.Claim("a", rwx)), "ReadWriteMany"},
			{e.createStuckPod("q-2-hostpath", "q-2", testobj.Claim("a", safe), testobj.HostPath("h", "/var/data")), "node-local"},
			{e.createStuckPod("q-2-inline", "q-2", testobj.InlineCSI("a", safeDriver)), "inline CSI"},
			{e.createStuckPod("q-2-novolume", "q-2"), "no volume from a safe-detach"},
		}
		for _, c := range cases {
			ev := e.waitEvent("Pod", ns, c.pod.Name, c.pod.UID, quarantine.EventNotSafe)
			if !strings.Contains(ev.Message, c.want) {
				t.Errorf("pod %s: event %q, want it to mention %q", c.pod.Name, ev.Message, c.want)
			}
		}
		// Each barrier takes the quarantine delay (2 s), so the 1 s resync
		// has looked at these pods again several times by then.
		e.quarantineBarrier()
		e.quarantineBarrier()
		for _, c := range cases {
			if !e.podExists(c.pod) {
				t.Errorf("pod %s was deleted", c.pod.Name)
			}
			evs := e.events("Pod", ns, c.pod.Name, c.pod.UID, quarantine.EventNotSafe)
			if len(evs) != 1 || evs[0].Count > 1 {
				t.Errorf("pod %s: want exactly one Event recorded once, got %+v", c.pod.Name, evs)
			}
		}
		if got := e.metricValue("fenceline_controller_safe_detach_refused_pods"); got < float64(len(cases)) {
			t.Errorf("safe_detach_refused_pods = %v, want at least the %d refused pods", got, len(cases))
		}
	})

	t.Run("Ready node: never quarantined", func(t *testing.T) {
		claim, _ := e.volume("q3", safeDriver, v1.ReadWriteOnce)
		e.createNode("q-3", true)
		p := e.createStuckPod("q-3-a", "q-3", testobj.Claim("data", claim))
		e.quarantineBarrier()
		if !e.podExists(p) || nodeutil.HasTaint(e.node("q-3"), names.QuarantineTaint) {
			t.Error("a Ready node was quarantined or its pod deleted")
		}
	})

	t.Run("lift with a surviving pod, then a short NotReady blip: nothing released", func(t *testing.T) { testLiftWithSurvivor(t, e) })

	t.Run("leftover quarantine and a short NotReady blip: nothing released before the delay", func(t *testing.T) { testBlipOnLeftoverQuarantine(t, e) })
}

// testLiftWithSurvivor: a pod that stayed does not hold the quarantine,
// and once lifted a NotReady blip releases nothing.
func testLiftWithSurvivor(t *testing.T, e *env) {
	gone, goneUnique := e.volume("q5-gone", safeDriver, v1.ReadWriteOnce)
	kept, keptUnique := e.volume("q5-kept", safeDriver, v1.ReadWriteOnce)
	e.createNode("q-5", false, testobj.VolumesInUse(goneUnique, keptUnique))
	p := e.createStuckPod("q-5-a", "q-5", testobj.Claim("data", gone))
	survivor := e.createPod("q-5-survivor", "q-5", testobj.Claim("data", kept))
	va := e.createVA("va-q5-gone", safeDriver, "pv-"+gone, "q-5")
	e.createVA("va-q5-kept", safeDriver, "pv-"+kept, "q-5")
	e.waitPodGone(p)
	e.waitFor("released volume gone from volumesInUse", func(context.Context) (bool, error) {
		return !slices.Contains(e.node("q-5").Status.VolumesInUse, goneUnique), nil
	})
	// Back: the released volume is detached and cleaned up; the
	// survivor's stays attached and in use.
	e.updateNode("q-5", true, func(n *v1.Node) {
		testobj.ReadySince(time.Now())(n)
		n.Status.VolumesInUse = []v1.UniqueVolumeName{keptUnique}
	})
	if err := e.admin.StorageV1().VolumeAttachments().Delete(e.ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The survivor's VolumeAttachment must not hold the quarantine.
	e.waitTaint("q-5", names.QuarantineTaint, false)
	// The survivor finishes; its kubelet still lists the volume while
	// it unmounts, and misses a few heartbeats.
	if err := e.admin.CoreV1().Pods(ns).Delete(e.ctx, survivor.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitPodGone(survivor)
	e.blip("q-5")
	if n := e.node("q-5"); !slices.Contains(n.Status.VolumesInUse, keptUnique) {
		t.Errorf("a NotReady blip released %s: volumesInUse = %v", keptUnique, n.Status.VolumesInUse)
	}
}

// testBlipOnLeftoverQuarantine: a quarantine still on the node does not let
// a NotReady blip shorter than the delay release a volume.
func testBlipOnLeftoverQuarantine(t *testing.T, e *env) {
	_, unique := e.volume("q6", safeDriver, v1.ReadWriteOnce)
	// Quarantined, Ready, and its kubelet has not finished the clean-up
	// of a fenced volume, so the quarantine stays.
	e.createNode("q-6", true, testobj.VolumesInUse(unique))
	e.addTaint("q-6", names.QuarantineTaint, v1.TaintEffectNoSchedule)
	e.liftBarrier()
	if !nodeutil.HasTaint(e.node("q-6"), names.QuarantineTaint) {
		t.Fatal("setup: quarantine lifted before the kubelet's clean-up")
	}
	e.blip("q-6")
	if n := e.node("q-6"); !slices.Contains(n.Status.VolumesInUse, unique) {
		t.Errorf("a NotReady blip shorter than the quarantine delay released %s: volumesInUse = %v", unique, n.Status.VolumesInUse)
	}
}
