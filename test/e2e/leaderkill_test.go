package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

// TestControllerLeaderKilledMidAction runs fenceline-controller as two
// replicas with leader election, as deployed, with a slow API client
// (--kube-api-qps=2, burst 1) so that its writes are spaced out. Node A of
// a safe-detach driver is powered off; the leader is killed with SIGKILL
// right after it quarantined the node (before any pod was marked or
// deleted), a replacement replica starts, and the next leader is killed
// right after it marked db-0 Failed (before deleting it). Proves that
// whoever leads next finishes the job: db-0 is force-deleted or gone,
// its volume released and fenced before it is published to the new node,
// and the failover invariant holds over the driver's audit log.
func TestControllerLeaderKilledMidAction(t *testing.T) {
	t.Parallel()
	s := newScenario(t, world.Options{
		ZombieWrites:       true,
		Driver:             world.DriverOptions{SafeDetach: true},
		ControllerReplicas: 2,
		ControllerArgs: []string{
			"--quarantine-delay=2s",
			"--kube-api-qps=2", "--kube-api-burst=1",
			// One renewal every 2 s leaves most of the budget to the work.
			"--leader-election-lease-duration=6s",
			"--leader-election-renew-deadline=5s",
			"--leader-election-retry-period=2s",
		},
	})
	pod := s.startDB()
	nodeA := pod.Spec.NodeName
	client := s.w.Cluster.Client()
	leader, err := s.w.LeadingController(s.ctx, startTimeout)
	must(t, err)
	t.Logf("first leader: %s", leader.Name)

	nodes, err := client.CoreV1().Nodes().Watch(s.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", nodeA).String()})
	must(t, err)
	defer nodes.Stop()
	pods, err := client.CoreV1().Pods(s.ns).Watch(s.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "db-0").String()})
	must(t, err)
	defer pods.Stop()

	s.powerOff(nodeA)
	// Kill 1: the quarantine taint is in the API, nothing deleted yet.
	must(t, watchUntil(s.ctx, nodes, failoverTimeout, "quarantine taint on "+nodeA, func(o any) bool {
		n, ok := o.(*corev1.Node)
		return ok && nodeutil.HasTaint(n, names.QuarantineTaint)
	}))
	leader.Kill()
	s.timeline.Add(time.Now(), "leader %s killed after the quarantine taint", leader.Name)
	cur, err := client.CoreV1().Pods(s.ns).Get(s.ctx, "db-0", metav1.GetOptions{})
	must(t, err)
	if cur.UID != pod.UID || cur.Status.Phase == corev1.PodFailed {
		t.Fatalf("setup: the leader got to db-0 (uid %s, phase %s) before it was killed; the kill came too late", cur.UID, cur.Status.Phase)
	}
	_, err = s.w.StartControllerReplica(s.ctx)
	must(t, err)

	// Kill 2: the next leader marked db-0 Failed, and has not deleted it.
	leader, err = s.w.LeadingController(s.ctx, failoverTimeout)
	must(t, err)
	t.Logf("second leader: %s", leader.Name)
	must(t, watchUntil(s.ctx, pods, failoverTimeout, "db-0 marked Failed", func(o any) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.UID == pod.UID && p.Status.Phase == corev1.PodFailed
	}))
	leader.Kill()
	s.timeline.Add(time.Now(), "leader %s killed after marking db-0 Failed", leader.Name)
	if logged(t, leader, "Force-deleted pod") {
		t.Fatalf("setup: %s deleted db-0 before it was killed; the kill came too late", leader.Name)
	}

	// The remaining replica leads and finishes.
	leader, err = s.w.LeadingController(s.ctx, failoverTimeout)
	must(t, err)
	t.Logf("third leader: %s", leader.Name)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.assertFencedBeforePublish(nodeA, moved.Spec.NodeName)
	if !nodeutil.HasTaint(s.node(s.ctx, nodeA), names.QuarantineTaint) {
		t.Fatalf("%s lost its quarantine taint while it is still down", nodeA)
	}
}

// watchUntil reads events from w until cond holds for an object.
func watchUntil(ctx context.Context, w watch.Interface, timeout time.Duration, what string, cond func(any) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("waiting for %s: watch closed", what)
			}
			if ev.Type != watch.Error && cond(ev.Object) {
				return nil
			}
		}
	}
}

// logged reports whether p's log contains msg.
func logged(t *testing.T, p *cluster.Process, msg string) bool {
	t.Helper()
	b, err := os.ReadFile(p.LogPath)
	must(t, err)
	return bytes.Contains(b, []byte(msg))
}
