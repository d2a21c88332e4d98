package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// TestQuarantineEvidenceIntegration: quarantine force-deletes pods and
// releases volumes of a safe-detach driver only while it sees positive,
// fresh evidence that a fence-capable fenceline-attacher serves the driver
// (a heartbeat Lease), the CSIDriver has attachRequired: true and the
// volume is not ReadWriteMany; otherwise it refuses with an Event that
// names what is missing.
func TestQuarantineEvidenceIntegration(t *testing.T) {
	opts := testOptions(quarantine.Name)
	opts.Settings[quarantine.Name].(*quarantine.Settings).Delay = testDelay
	// Far beyond every wait: what happens must come from events.
	opts.Resync = 10 * time.Minute
	e := newEnv(t)
	// An attacher that stopped before the controller started: its Lease,
	// found in the controller's first list, is never seen renewed.
	e.staleHeartbeat("stale.fenceline.io", time.Now().Add(-time.Hour), testobj.LeaseDuration(15*time.Second))
	e.runController(opts)
	e.safeDetachDriver(safeDriver, true)
	e.heartbeat(safeDriver, time.Now())

	t.Run("missing or stale evidence: pods refused, volumes kept, each with an Event naming what is missing", func(t *testing.T) {
		testRefusedWithoutEvidence(t, e)
	})
	t.Run("heartbeat appears later: the node is looked at again at once and the pod force-deleted", func(t *testing.T) {
		testHeartbeatAppears(t, e)
	})
}

// evidenceCase is a safe-detach volume whose driver lacks one piece of the
// evidence, and what the refusal must name.
type evidenceCase struct {
	name, driver string
	mode         v1.PersistentVolumeAccessMode
	want         string
}

func testRefusedWithoutEvidence(t *testing.T, e *env) {
	cases := []evidenceCase{
		{"no heartbeat", "nohb.fenceline.io", v1.ReadWriteOnce, "no fenceline-attacher heartbeat Lease"},
		{"heartbeat not renewed since the controller started", "stale.fenceline.io", v1.ReadWriteOnce, "seen yet"},
		{"attacher without UNPUBLISH_FENCE", "nofence.fenceline.io", v1.ReadWriteOnce, "does not advertise UNPUBLISH_FENCE"},
		{"attachRequired false", "noattach.fenceline.io", v1.ReadWriteOnce, "attachRequired: false"},
		{"ReadWriteMany volume", safeDriver, v1.ReadWriteMany, "ReadWriteMany"},
	}
	e.safeDetachDriver("nohb.fenceline.io", true)
	e.safeDetachDriver("stale.fenceline.io", true)
	e.safeDetachDriver("nofence.fenceline.io", true)
	e.heartbeat("nofence.fenceline.io", time.Now(), testobj.NoUnpublishFence())
	e.safeDetachDriver("noattach.fenceline.io", false)
	e.heartbeat("noattach.fenceline.io", time.Now())

	// ev-1 holds a stuck pod per case; ev-2, already quarantined, lists
	// one volume per case that no pod on it uses any more.
	var used, unused []v1.UniqueVolumeName
	var claims []string
	for i, c := range cases {
		claim, u := e.volume(fmt.Sprintf("ev-used-%d", i), c.driver, c.mode)
		_, un := e.volume(fmt.Sprintf("ev-unused-%d", i), c.driver, c.mode)
		used, unused, claims = append(used, u), append(unused, un), append(claims, claim)
	}
	e.createNode("ev-1", false, testobj.VolumesInUse(used...))
	var pods []*v1.Pod
	for i, claim := range claims {
		pods = append(pods, e.createStuckPod(fmt.Sprintf("ev-1-%d", i), "ev-1", testobj.Claim("data", claim)))
	}
	e.createNode("ev-2", false, testobj.VolumesInUse(unused...))
	e.addTaint("ev-2", names.QuarantineTaint, v1.TaintEffectNoSchedule)

	// The barrier's node went NotReady after ev-1 and ev-2: the single
	// worker has decided on both by the time it is done.
	e.quarantineBarrier()
	refusal := func(i int) string {
		return e.eventMessages("Pod", ns, pods[i].Name, pods[i].UID, quarantine.EventNotSafe)
	}
	kept := func() string { return e.eventMessages("Node", "", "ev-2", "", quarantine.EventNotReleased) }
	// Events are recorded asynchronously: give them until the deadline,
	// then report every case that is wrong, not only the first.
	_ = wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		for i, c := range cases {
			if !strings.Contains(refusal(i), c.want) || !strings.Contains(kept(), c.want) {
				return false, nil
			}
		}
		return true, nil
	})
	for i, c := range cases {
		if !e.podExists(pods[i]) {
			t.Errorf("%s: pod force-deleted", c.name)
		}
		if got := refusal(i); !strings.Contains(got, c.want) {
			t.Errorf("%s: refusal Event %q does not name %q", c.name, got, c.want)
		}
		if got := kept(); !strings.Contains(got, c.want) {
			t.Errorf("%s: %s Events on ev-2 %q do not name %q", c.name, quarantine.EventNotReleased, got, c.want)
		}
	}
	if n := e.node("ev-1"); nodeutil.HasTaint(n, names.QuarantineTaint) || !slices.Equal(n.Status.VolumesInUse, used) {
		t.Errorf("ev-1 quarantined or its volumes released: taints %v, volumesInUse %v", n.Spec.Taints, n.Status.VolumesInUse)
	}
	if n := e.node("ev-2"); !slices.Equal(n.Status.VolumesInUse, unused) {
		t.Errorf("ev-2 released volumes without evidence: volumesInUse %v, want %v", n.Status.VolumesInUse, unused)
	}
}

// eventMessages joins the messages of the Events about an object with the
// reason: a reason that changed while caches filled leaves several.
func (e *env) eventMessages(kind, namespace, name string, uid types.UID, reason string) string {
	e.t.Helper()
	var msgs []string
	for _, ev := range e.events(kind, namespace, name, uid, reason) {
		msgs = append(msgs, ev.Message)
	}
	return strings.Join(msgs, "\n")
}

func testHeartbeatAppears(t *testing.T, e *env) {
	const driver = "late.fenceline.io"
	e.safeDetachDriver(driver, true)
	claim, unique := e.volume("ev-late", driver, v1.ReadWriteOnce)
	e.createNode("ev-late", false, testobj.VolumesInUse(unique))
	p := e.createStuckPod("ev-late-a", "ev-late", testobj.Claim("data", claim))
	ev := e.waitEvent("Pod", ns, p.Name, p.UID, quarantine.EventNotSafe)
	if !strings.Contains(ev.Message, "heartbeat") {
		t.Fatalf("refusal %q does not name the missing heartbeat", ev.Message)
	}
	start := time.Now()
	e.heartbeat(driver, time.Now())
	e.waitPodGone(p)
	e.waitFor("volume released from volumesInUse", func(context.Context) (bool, error) {
		return !slices.Contains(e.node("ev-late").Status.VolumesInUse, unique), nil
	})
	t.Logf("pod force-deleted and volume released %s after the heartbeat appeared (resync %s)", time.Since(start).Round(time.Millisecond), 10*time.Minute)
}
