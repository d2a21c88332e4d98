package kubelet

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

func TestShutdownGroups(t *testing.T) {
	pod := func(name string, priority *int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Priority: priority}}
	}
	pods := []*corev1.Pod{
		pod("no-priority", nil),
		pod("negative", ptr.To[int32](-10)),
		pod("user-high", ptr.To[int32](1_000_000_000)),
		pod("cluster-critical", ptr.To[int32](2_000_000_000)),
		pod("node-critical", ptr.To[int32](2_000_001_000)),
	}
	type group struct {
		grace time.Duration
		pods  []string
	}
	tests := []struct {
		name string
		cfg  ShutdownConfig
		want []group // nil: graceful node shutdown off
	}{
		{name: "off: no grace period (the kubelet default)", cfg: ShutdownConfig{}},
		{name: "off: under a second is zero seconds", cfg: ShutdownConfig{GracePeriod: 900 * time.Millisecond}},
		{name: "off: the critical part exceeds the whole", cfg: ShutdownConfig{GracePeriod: 10 * time.Second, GracePeriodCriticalPods: 11 * time.Second}},
		{
			name: "regular pods first, critical ones with the rest",
			cfg:  ShutdownConfig{GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second},
			want: []group{{20 * time.Second, []string{"no-priority", "negative", "user-high"}}, {10 * time.Second, []string{"cluster-critical", "node-critical"}}},
		},
		{
			name: "no critical part: critical pods get no time",
			cfg:  ShutdownConfig{GracePeriod: 5 * time.Second},
			want: []group{{5 * time.Second, []string{"no-priority", "negative", "user-high"}}, {0, []string{"cluster-critical", "node-critical"}}},
		},
		{
			name: "whole seconds, as the kubelet's configuration",
			cfg:  ShutdownConfig{GracePeriod: 3500 * time.Millisecond, GracePeriodCriticalPods: 1900 * time.Millisecond},
			want: []group{{2 * time.Second, []string{"no-priority", "negative", "user-high"}}, {time.Second, []string{"cluster-critical", "node-critical"}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []group
			for _, g := range shutdownGroups(tc.cfg, pods) {
				names := []string{}
				for _, p := range g.pods {
					names = append(names, p.Name)
				}
				got = append(got, group{g.grace, names})
			}
			if len(got) != len(tc.want) {
				t.Fatalf("groups %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i].grace != tc.want[i].grace || !slices.Equal(got[i].pods, tc.want[i].pods) {
					t.Errorf("group %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPodGraceAndStopPlan(t *testing.T) {
	tests := []struct {
		name                 string
		tgps                 *int64
		groupGrace, stopTime time.Duration
		wantGrace, wantAfter time.Duration
		wantKilled, inTime   bool
	}{
		{name: "exits on SIGTERM within the group's grace", tgps: ptr.To[int64](30), groupGrace: 5 * time.Second, stopTime: time.Second,
			wantGrace: 5 * time.Second, wantAfter: time.Second, inTime: true},
		{name: "its own shorter grace, SIGKILLed at it, still in time", tgps: ptr.To[int64](2), groupGrace: 5 * time.Second, stopTime: 4 * time.Second,
			wantGrace: 2 * time.Second, wantAfter: 2 * time.Second, wantKilled: true, inTime: true},
		{name: "outlives the group: the kubelet gives up", tgps: ptr.To[int64](30), groupGrace: 3 * time.Second, stopTime: 10 * time.Second,
			wantGrace: 3 * time.Second, wantAfter: 3 * time.Second, wantKilled: true},
		{name: "no terminationGracePeriodSeconds: the group's", groupGrace: 3 * time.Second,
			wantGrace: 3 * time.Second, inTime: true},
		{name: "a group of no time stops nothing in time", tgps: ptr.To[int64](30),
			wantKilled: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			grace := podGrace(&corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: tc.tgps}}, tc.groupGrace)
			if grace != tc.wantGrace {
				t.Fatalf("podGrace = %s, want %s", grace, tc.wantGrace)
			}
			after, killed, inTime := stopPlan(tc.stopTime, grace, tc.groupGrace)
			if after != tc.wantAfter || killed != tc.wantKilled || inTime != tc.inTime {
				t.Errorf("stopPlan(%s, %s, %s) = %s, killed %t, in time %t; want %s, %t, %t",
					tc.stopTime, grace, tc.groupGrace, after, killed, inTime, tc.wantAfter, tc.wantKilled, tc.inTime)
			}
		})
	}
}

func TestKilledStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-time.Hour))
	running := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "db", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}},
	}
	for _, tc := range []struct {
		name     string
		killed   bool
		exitCode int32
	}{
		{name: "exited on SIGTERM", exitCode: 0},
		{name: "SIGKILLed at its grace", killed: true, exitCode: 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := *running.DeepCopy()
			killedStatus(&st, []corev1.Container{{Name: "db"}}, tc.killed, now)
			if st.Phase != corev1.PodFailed || st.Reason != "Terminated" || st.Message != "Pod was terminated in response to imminent node shutdown." {
				t.Errorf("phase %s, reason %q, message %q", st.Phase, st.Reason, st.Message)
			}
			want := map[corev1.PodConditionType]corev1.ConditionStatus{
				corev1.DisruptionTarget: corev1.ConditionTrue, corev1.PodReady: corev1.ConditionFalse,
				corev1.ContainersReady: corev1.ConditionFalse, corev1.PodScheduled: corev1.ConditionTrue,
			}
			for _, c := range st.Conditions {
				if want[c.Type] != c.Status {
					t.Errorf("condition %s = %s, want %s", c.Type, c.Status, want[c.Type])
				}
				if c.Type == corev1.DisruptionTarget && (c.Reason != "TerminationByKubelet" || c.Message != ShutdownPodMessage) {
					t.Errorf("DisruptionTarget reason %q message %q", c.Reason, c.Message)
				}
				delete(want, c.Type)
			}
			if len(want) != 0 {
				t.Errorf("conditions missing: %v", want)
			}
			if len(st.ContainerStatuses) != 1 {
				t.Fatalf("container statuses %+v", st.ContainerStatuses)
			}
			cs := st.ContainerStatuses[0]
			if cs.Ready || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != tc.exitCode ||
				!cs.State.Terminated.StartedAt.Equal(&started) || !cs.State.Terminated.FinishedAt.Time.Equal(now) {
				t.Errorf("container status %+v, want terminated with exit code %d, started %s, finished %s", cs, tc.exitCode, started, now)
			}
		})
	}
}

func TestShuttingDownPatch(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	patch, err := shuttingDownPatch(now)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status corev1.NodeStatus `json:"status"`
	}
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatal(err)
	}
	ready := nodeutil.ReadyCondition(&corev1.Node{Status: got.Status})
	if ready == nil || ready.Status != corev1.ConditionFalse || ready.Reason != "KubeletNotReady" || ready.Message != "node is shutting down" ||
		!ready.LastHeartbeatTime.Time.Equal(now) {
		t.Errorf("Ready condition %+v, want False, KubeletNotReady, \"node is shutting down\", heartbeat %s", ready, now)
	}
	if got.Status.VolumesInUse != nil {
		t.Errorf("the shutdown's status update reports volumesInUse %v; it changes only the Ready condition", got.Status.VolumesInUse)
	}
}

// TestShutdown runs a graceful shutdown on the stand-in: the node posted
// shutting down while its Lease is renewed, the pod killed and reported
// as the kubelet reports it, its volume unpublished within the grace, no
// write sent after the pod stopped accepted, and the power off at the
// end. What volumesInUse says at the power-off depends on whether a
// status update got out; a grace too short leaves the pod Running with
// its volume published, and a pod that arrives meanwhile is rejected.
func TestShutdown(t *testing.T) {
	tests := []struct {
		name string
		cfg  ShutdownConfig
		// lateArrival binds a pod to the node once it reports shutting down.
		lateArrival bool
		// stopped: the pod is stopped and reported in time; reported: the
		// node's volumesInUse no longer lists the volume at the power-off.
		stopped, reported bool
	}{
		{name: "stops in time, last status update not made", cfg: ShutdownConfig{GracePeriod: 3 * time.Second, StopTime: 300 * time.Millisecond}, stopped: true},
		{name: "stops in time, last status update made", cfg: ShutdownConfig{GracePeriod: 3 * time.Second, StopTime: 300 * time.Millisecond, ReportReleased: true},
			stopped: true, reported: true},
		// A grace of seconds leaves a loaded machine time to bind the late
		// pod and see it rejected before the power-off.
		{name: "grace too short: the kubelet gives up", cfg: ShutdownConfig{GracePeriod: 5 * time.Second, StopTime: 30 * time.Second}, lateArrival: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFixture(t, nil)
			ctx, cs, k := f.ctx, f.cs, f.k
			type result struct {
				rep ShutdownReport
				err error
			}
			done := make(chan result, 1)
			go func() {
				rep, err := k.Shutdown(ctx, tc.cfg)
				done <- result{rep, err}
			}()
			var renewedWhileDown time.Time
			poll(t, ctx, "the node posted shutting down and its Lease renewed since", func(ctx context.Context) (bool, error) {
				n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
				if err != nil {
					return false, nil //nolint:nilerr // keep polling
				}
				ready := nodeutil.ReadyCondition(n)
				if ready == nil || ready.Status != corev1.ConditionFalse || ready.Reason != "KubeletNotReady" || ready.Message != ShutdownReadyMessage {
					return false, nil
				}
				// No Lease exists before: the fixture runs no KWOK.
				l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
				if err != nil || l.Spec.RenewTime == nil {
					return false, nil //nolint:nilerr // keep polling
				}
				renewedWhileDown = l.Spec.RenewTime.Time
				return true, nil
			})
			if tc.lateArrival {
				late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
				if _, err := cs.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				poll(t, ctx, "the late pod rejected", func(ctx context.Context) (bool, error) {
					p, err := cs.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
					return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == ShutdownRejectReason && p.Status.Message == ShutdownRejectMessage, nil
				})
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			rep := res.rep
			if k.Powered() {
				t.Fatal("the node is still powered on after its shutdown")
			}
			if rep.Started.IsZero() || rep.Released.Before(rep.Started) || rep.PoweredOff.Before(rep.Released) || renewedWhileDown.After(rep.PoweredOff) {
				t.Fatalf("report %+v, Lease renewed at %s: want started, then released, then powered off", rep, renewedWhileDown)
			}
			if len(rep.Pods) != 1 || rep.Pods[0].Pod != (types.NamespacedName{Namespace: "default", Name: "db"}) {
				t.Fatalf("pods killed %+v, want default/db", rep.Pods)
			}
			killed := rep.Pods[0]
			if killed.Grace != tc.cfg.GracePeriod {
				t.Errorf("grace %s, want the whole grace period %s (the pod's own is 30 s)", killed.Grace, tc.cfg.GracePeriod)
			}
			if got := !killed.Stopped.IsZero() && killed.Unmounted; got != tc.stopped {
				t.Fatalf("pod %+v: stopped and unmounted = %t, want %t", killed, got, tc.stopped)
			}
			if want := tc.lateArrival; want != slices.Contains(rep.Rejected, types.NamespacedName{Namespace: "default", Name: "late"}) {
				t.Errorf("rejected %v, want the late pod there: %t", rep.Rejected, want)
			}

			p, err := cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			disrupted := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet
			})
			if failed := p.Status.Phase == corev1.PodFailed && p.Status.Reason == ShutdownPodReason && disrupted; failed != tc.stopped {
				t.Errorf("pod status %s/%q, DisruptionTarget %t: reported killed = %t, want %t", p.Status.Phase, p.Status.Reason, disrupted, failed, tc.stopped)
			}

			recs, err := audit.ReadFile(f.d.AuditPath())
			if err != nil {
				t.Fatal(err)
			}
			unpub := audit.FirstIndex(recs, audit.Method("NodeUnpublishVolume"), audit.Volume(f.handle), audit.OK())
			if tc.stopped && (unpub < 0 || recs[unpub].Time.After(rep.Released)) {
				t.Errorf("no NodeUnpublishVolume before the lock was released (%s): record %d", rep.Released, unpub)
			}
			if !tc.stopped && unpub >= 0 {
				t.Errorf("volume unpublished (record %d) although the kubelet gave up on its pod", unpub)
			}
			if n := audit.Count(recs, audit.Forced()); n != 0 {
				t.Errorf("%d calls with force; the kubelet never sends it", n)
			}
			// Nothing the workload sent once its containers stopped was
			// accepted: with ZombieWrites on, only a writer the shutdown
			// forgot would go on after the power-off.
			stoppedAt := killed.Stopped
			if !tc.stopped {
				stoppedAt = rep.Released
			}
			if acc, _ := SentAfter(k.Writes(), stoppedAt); acc != 0 {
				t.Errorf("%d writes sent after the pod's containers stopped (%s) were accepted", acc, stoppedAt)
			}
			if published := slices.Contains(k.Published(), f.handle); published == tc.stopped {
				t.Errorf("volume published at the power-off = %t, want %t", published, !tc.stopped)
			}
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if listed := slices.Contains(n.Status.VolumesInUse, f.unique); listed == tc.reported {
				t.Errorf("volumesInUse %v at the power-off: lists the volume = %t, want %t", n.Status.VolumesInUse, listed, !tc.reported)
			}
			evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=" + ShutdownEventReason})
			if err != nil || len(evs.Items) != 1 {
				t.Errorf("shutdown Events on the node: %v (err %v), want 1", evs, err)
			}

			// A boot ends the shutdown: the stand-in is a kubelet again.
			if err := k.PowerOn(); err != nil {
				t.Fatal(err)
			}
			if k.ShuttingDown() {
				t.Error("still shutting down after a power-on")
			}
		})
	}
}
