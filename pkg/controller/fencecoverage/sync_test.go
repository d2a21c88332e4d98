package fencecoverage

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
)

// syncEnv is the controller on the fixture, with its own metrics.
type syncEnv struct {
	*ctrltest.Fixture
	c *Controller
	m *Metrics
}

func newSyncEnv(t *testing.T, objs ...runtime.Object) *syncEnv {
	t.Helper()
	f := ctrltest.New(t, testobj.Epoch, objs...)
	m := NewMetrics()
	c, err := New(Config{Informers: f.Informers, Fencing: f.FencingInformers, Client: f.Fencing, Recorder: f.Recorder, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	return &syncEnv{Fixture: f, c: c, m: m}
}

func (e *syncEnv) sync(policy string) ctrltest.Result {
	e.T.Helper()
	r := e.Sync(e.c.sync, policy)
	if r.Err != nil {
		e.T.Fatalf("sync %s: %v", policy, r.Err)
	}
	return r
}

func (e *syncEnv) coverage(policy string) *fencingv1alpha1.FenceCoverage {
	e.T.Helper()
	p, err := e.Fencing.FencingV1alpha1().FencePolicies().Get(e.Ctx, policy, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return p.Status.Coverage
}

// A policy's coverage is written once per change, with an Event per node
// that changed, next to the storm guard's state; metrics follow; a deleted
// policy loses its series.
func TestSync(t *testing.T) {
	policy := testobj.FencePolicy("workers", testobj.Selecting("role", "worker"))
	policy.Status.StormGuard = &fencingv1alpha1.StormGuardStatus{StormActive: true}
	worker := func(name string) runtime.Object { return testobj.Node(name, testobj.Label("role", "worker")) }
	e := newSyncEnv(t, policy, testobj.FenceClass("bmc"), worker("w1"), worker("w2"), testobj.Node("other"), reachable("w1"))

	r := e.sync("workers")
	r.Check(t, ctrltest.Want{
		Writes: [][]string{{"update fencepolicies/status workers"}},
		Events: []string{"Warning " + EventNodeNotFenceable + " Node w2 cannot be fenced: " + ReasonNoFenceTarget},
	})
	cov := e.coverage("workers")
	if cov == nil || cov.SelectedNodes != 2 || cov.UncoveredNodes != 1 || len(cov.Uncovered) != 1 || cov.Uncovered[0].Node != "w2" {
		t.Fatalf("coverage %+v, want 2 selected, w2 uncovered", cov)
	}
	if p, _ := e.Fencing.FencingV1alpha1().FencePolicies().Get(e.Ctx, "workers", metav1.GetOptions{}); p.Status.StormGuard == nil || !p.Status.StormGuard.StormActive {
		t.Errorf("the storm guard's state was lost: %+v", p.Status.StormGuard)
	}
	if got := testutil.ToFloat64(e.m.UncoveredNodes.WithLabelValues("workers")); got != 1 {
		t.Errorf("uncovered nodes metric %v, want 1", got)
	}

	// Nothing changed: no write, no Event.
	e.sync("workers").Check(t, ctrltest.Want{})

	// w2 gets a reachable FenceTarget.
	if _, err := e.Fencing.FencingV1alpha1().FenceTargets().Create(e.Ctx, reachable("w2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sync("workers").Check(t, ctrltest.Want{
		Writes: [][]string{{"update fencepolicies/status workers"}},
		Events: []string{"Normal " + EventNodeFenceable + " Node w2 can be fenced again"},
	})
	if cov := e.coverage("workers"); cov.UncoveredNodes != 0 || len(cov.Uncovered) != 0 {
		t.Errorf("coverage %+v, want nothing uncovered", cov)
	}
	if got := testutil.ToFloat64(e.m.SelectedNodes.WithLabelValues("workers")); got != 2 {
		t.Errorf("selected nodes metric %v, want 2", got)
	}

	if err := e.Fencing.FencingV1alpha1().FencePolicies().Delete(e.Ctx, "workers", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sync("workers").Check(t, ctrltest.Want{})
	if n := testutil.CollectAndCount(e.m.UncoveredNodes); n != 0 {
		t.Errorf("%d uncovered-node series after the policy was deleted, want 0", n)
	}
}

// A first sync that finds many uncovered nodes records a bounded number of
// Events; the status counts them all.
func TestSyncBoundsEvents(t *testing.T) {
	objs := []runtime.Object{testobj.FencePolicy("all"), testobj.FenceClass("bmc")}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		objs = append(objs, testobj.Node(n))
	}
	e := newSyncEnv(t, objs...)
	r := e.sync("all")
	if len(r.Events) != maxEventsPerSync {
		t.Errorf("%d Events, want %d", len(r.Events), maxEventsPerSync)
	}
	if cov := e.coverage("all"); cov.UncoveredNodes != 12 {
		t.Errorf("uncovered %d, want 12", cov.UncoveredNodes)
	}
}

// A FenceTarget that no Node is named after is said once, with a Warning
// Event, and counted; once the Node exists (or the target goes) it is not.
func TestSyncTargetWithoutNode(t *testing.T) {
	e := newSyncEnv(t, testobj.FencePolicy("all"), testobj.Node("w1"), reachable("w1"), reachable("w1-typo"))
	e.Sync(e.c.syncTarget, "w1").Check(t, ctrltest.Want{})
	e.Sync(e.c.syncTarget, "w1-typo").Check(t, ctrltest.Want{Events: []string{"Warning " + EventTargetWithoutNode + " No Node is named w1-typo"}})
	e.Sync(e.c.syncTarget, "w1-typo").Check(t, ctrltest.Want{}) // said once
	if got := testutil.ToFloat64(e.m.TargetsWithoutNode); got != 1 {
		t.Errorf("targets without a node = %v, want 1", got)
	}
	if _, err := e.Kube.CoreV1().Nodes().Create(e.Ctx, testobj.Node("w1-typo"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.c.syncTarget, "w1-typo").Check(t, ctrltest.Want{})
	if got := testutil.ToFloat64(e.m.TargetsWithoutNode); got != 0 {
		t.Errorf("targets without a node = %v after the node came, want 0", got)
	}
	// The node goes again, then the target: counted, then not.
	if err := e.Kube.CoreV1().Nodes().Delete(e.Ctx, "w1-typo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.c.syncTarget, "w1-typo").Check(t, ctrltest.Want{Events: []string{"Warning " + EventTargetWithoutNode}})
	if err := e.Fencing.FencingV1alpha1().FenceTargets().Delete(e.Ctx, "w1-typo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Sync(e.c.syncTarget, "w1-typo").Check(t, ctrltest.Want{})
	if got := testutil.ToFloat64(e.m.TargetsWithoutNode); got != 0 {
		t.Errorf("targets without a node = %v after the target went, want 0", got)
	}
}
