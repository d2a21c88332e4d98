package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

// scenarioTimeout bounds one scenario. The stories run two at a time
// (t.Parallel, go test's -parallel defaults to the number of CPUs): each
// world has its own control plane, ports and directories, and most of a
// story is waiting for a delay or a deadline.
const scenarioTimeout = 4 * time.Minute

// Deadlines for the steps of a failover. They are generous upper bounds for
// a loaded CI machine, not performance goals (those are benchmarks).
const (
	nodeLostTimeout = 30 * time.Second
	failoverTimeout = 90 * time.Second
	startTimeout    = 60 * time.Second
)

// scenario is one running world with a StatefulSet "db" of one pod in its
// own namespace, plus a timeline printed when the test fails.
type scenario struct {
	t        *testing.T
	ctx      context.Context
	w        *world.World
	ns       string
	handle   string // volume handle of db-0's claim
	timeline *world.Timeline
	t0       time.Time
	// pinTo, when set, is where startDB places db-0: every other node is
	// cordoned until it runs there.
	pinTo string
	// editSTS, when set, changes the StatefulSet startDB creates.
	editSTS func(*appsv1.StatefulSet)
}

func newScenario(t *testing.T, opts world.Options) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	if opts.WriteInterval == 0 {
		opts.WriteInterval = 100 * time.Millisecond
	}
	w := world.Start(t, opts)
	s := &scenario{t: t, ctx: ctx, w: w, ns: "app", timeline: &world.Timeline{}, t0: time.Now()}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	t.Cleanup(func() {
		if t.Failed() {
			if recs, err := w.Audit(); err == nil {
				s.timeline.AddAudit(recs)
			}
			t.Logf("timeline (seconds from power-off or start):\n%s", s.timeline.Format(s.t0))
		}
	})
	must(t, w.CreateNamespace(ctx, s.ns))
	s.timeline.Watch(w.Cluster.Client(), s.ns, stop)
	must(t, w.CreateStorageClass(ctx))
	handles, err := w.ProvisionStatefulSet(ctx, s.ns, "db", 1)
	must(t, err)
	s.handle = handles[0]
	return s
}

// startDB creates the StatefulSet and returns its pod once Running with
// its volume written to from its node.
func (s *scenario) startDB() *corev1.Pod {
	s.t.Helper()
	if s.pinTo != "" {
		uncordon, err := s.w.OnlyOn(s.ctx, s.pinTo)
		must(s.t, err)
		defer func() { must(s.t, uncordon(s.ctx)) }()
	}
	sts := world.StatefulSet(s.ns, "db", 1)
	if s.editSTS != nil {
		s.editSTS(sts)
	}
	_, err := s.w.Cluster.Client().AppsV1().StatefulSets(s.ns).Create(s.ctx, sts, metav1.CreateOptions{})
	must(s.t, err)
	pod, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", "", startTimeout)
	must(s.t, err)
	if s.pinTo != "" && pod.Spec.NodeName != s.pinTo {
		s.t.Fatalf("db-0 runs on %s, want %s", pod.Spec.NodeName, s.pinTo)
	}
	s.waitAcceptedWrite(pod.Spec.NodeName, time.Time{})
	return pod
}

// waitAcceptedWrite waits until the stand-in of node has a write accepted
// after t.
func (s *scenario) waitAcceptedWrite(node string, after time.Time) {
	s.t.Helper()
	must(s.t, s.w.WaitAcceptedWrite(s.ctx, node, after, startTimeout))
}

// powerOff cuts node's power and waits for the control plane to notice.
func (s *scenario) powerOff(node string) {
	s.t.Helper()
	s.t0 = time.Now()
	s.timeline.Add(s.t0, "node %s powered off", node)
	must(s.t, s.w.PowerOff(s.ctx, node))
	must(s.t, s.w.Cluster.WaitNodeReady(s.ctx, node, corev1.ConditionUnknown, nodeLostTimeout))
}

// outOfService applies the out-of-service taint to node, as an operator
// who knows it is off does, and returns db-0 once it is Running elsewhere.
func (s *scenario) outOfService(node string) *corev1.Pod {
	s.t.Helper()
	must(s.t, s.w.AddTaint(s.ctx, node, world.OutOfServiceTaint))
	s.timeline.Add(time.Now(), "out-of-service taint added to %s", node)
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", node, failoverTimeout)
	must(s.t, err)
	return moved
}

// waitClaimEvent waits for an Event with reason on the claim in the
// scenario's namespace, where `kubectl describe pvc` shows it.
func (s *scenario) waitClaimEvent(claim, reason string) {
	s.t.Helper()
	selector := "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=" + claim + ",reason=" + reason
	must(s.t, world.WaitFor(s.ctx, failoverTimeout, "Event "+reason+" on PersistentVolumeClaim "+claim, func(ctx context.Context) (bool, error) {
		evs, err := s.w.Cluster.Client().CoreV1().Events(s.ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		return err == nil && len(evs.Items) > 0, nil
	}))
}

func (s *scenario) audit() []audit.Record {
	s.t.Helper()
	recs, err := s.w.Audit()
	must(s.t, err)
	return recs
}

// fenceIndex returns the index of the first successful fenced unpublish of
// the db volume from node since it was last published there, or -1.
func (s *scenario) fenceIndex(recs []audit.Record, node string) int {
	return world.FenceIndex(recs, s.handle, node)
}

// assertFencedBeforePublish checks the driver's audit log for the latest
// move of the db volume away from oldNode: it was unpublished from oldNode
// with fence=true before it was published to newNode, no plain unpublish
// from oldNode succeeded, and no write from oldNode was accepted after the
// fence, while oldNode did keep trying (the zombie) and was refused.
func (s *scenario) assertFencedBeforePublish(oldNode, newNode string) {
	s.t.Helper()
	// The zombie writes every 100 ms; wait until a refusal is on record so
	// that "nothing accepted" is not vacuous.
	var recs []audit.Record
	must(s.t, world.WaitFor(s.ctx, 20*time.Second, "a refused write from "+oldNode+" after the fence", func(context.Context) (bool, error) {
		recs = s.audit()
		i := s.fenceIndex(recs, oldNode)
		return i >= 0 && audit.Count(recs[i+1:], audit.Method("Write"), audit.Node(oldNode), audit.Volume(s.handle), audit.Code("PermissionDenied")) > 0, nil
	}))
	since := audit.LastIndex(recs, audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(oldNode), audit.OK()) + 1
	fence := s.fenceIndex(recs, oldNode)
	publish := audit.FirstIndex(recs[since:], audit.Method("ControllerPublishVolume"), audit.Volume(s.handle), audit.Node(newNode), audit.OK())
	if publish < 0 {
		s.t.Fatalf("no successful ControllerPublishVolume of %s to %s after record %d in the audit log", s.handle, newNode, since)
	}
	publish += since
	if publish < fence {
		s.t.Fatalf("ControllerPublishVolume to %s (record %d) came before the fenced unpublish from %s (record %d)", newNode, publish, oldNode, fence)
	}
	if n := audit.Count(recs[fence+1:], audit.Method("Write"), audit.Node(oldNode), audit.Volume(s.handle), audit.OK()); n != 0 {
		s.t.Fatalf("%d writes from %s accepted after the fence", n, oldNode)
	}
	if n := audit.Count(recs[since:], audit.Method("ControllerUnpublishVolume"), audit.Volume(s.handle), audit.Node(oldNode), audit.OK(), func(r audit.Record) bool { return !r.Fence }); n != 0 {
		s.t.Fatalf("%d plain (unfenced) unpublishes of %s from %s succeeded", n, s.handle, oldNode)
	}
	s.assertInvariant(oldNode, newNode)
}

// assertInvariant checks the failover invariant (package test/invariant)
// over the driver's audit log: the db volume, cut off from oldNode at the
// power-off, moved to newNode with every rule kept.
func (s *scenario) assertInvariant(oldNode, newNode string) {
	s.t.Helper()
	must(s.t, s.w.CheckFailoverTo(invariant.Failover{Volume: s.handle, From: oldNode, CutOff: s.t0}, newNode))
}

// waitNodeCleanedUp waits until node ran node-side clean-up of the db
// volume after its power-on (unforced, as the upstream kubelet sends it).
func (s *scenario) waitNodeCleanedUp(node string) {
	s.t.Helper()
	must(s.t, world.WaitFor(s.ctx, startTimeout, "clean-up of the volume on "+node, func(context.Context) (bool, error) {
		recs := s.audit()
		return audit.Count(recs, audit.Method("NodeUnstageVolume"), audit.Node(node), audit.Volume(s.handle), audit.OK()) > 0, nil
	}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func otherNode(w *world.World, not string) string {
	for _, n := range w.Nodes {
		if n != not {
			return n
		}
	}
	panic(fmt.Sprintf("no node other than %s", not))
}
