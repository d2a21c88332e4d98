package nodefencing

import (
	"k8s.io/utils/ptr"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// env is node-fencing on the controller fixture (ctrltest), with the
// Events of its syncs kept until the test takes them. The Events on
// FencingRequests go to a recorder of their own, so that a test can tell
// them from those on the Node.
type env struct {
	*ctrltest.Fixture
	t          *testing.T
	c          *Controller
	events     []string
	onRequests *record.FakeRecorder
	// Metrics are node-fencing's own (the fixture's are the shared ones).
	Metrics *Metrics
}

// newEnv starts the controller with the objects in the fake API servers,
// the clock at now. The controller starts as if it had watched the Leases'
// renewals happen (at their renewTime: the clocks agree).
func newEnv(t *testing.T, now time.Time, objs ...runtime.Object) *env {
	t.Helper()
	return startEnv(t, now, true, objs...)
}

// startEnv is newEnv; with seeded false the controller starts fresh, with
// no history of the Leases' renewals (a restart).
func startEnv(t *testing.T, now time.Time, seeded bool, objs ...runtime.Object) *env {
	t.Helper()
	return startEnvWith(t, now, seeded, nil, objs...)
}

// startEnvWith is startEnv with the controller's Config changed by tweak
// (nil: as is).
func startEnvWith(t *testing.T, now time.Time, seeded bool, tweak func(*Config), objs ...runtime.Object) *env {
	t.Helper()
	f := ctrltest.New(t, now, objs...)
	requests := record.NewFakeRecorder(100)
	m := NewMetrics()
	cfg := Config{
		Informers: f.Informers, NodeLeases: f.NodeLeases, Fencing: f.FencingInformers, Client: f.Fencing,
		Actuator: f.Actuator, Recorder: requests, Metrics: m,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.now = f.Clock.Now
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok && seeded && l.Spec.RenewTime != nil {
			c.renewals.Seed(l, l.Spec.RenewTime.Time)
		}
	}
	f.Start()
	return &env{Fixture: f, t: t, c: c, onRequests: requests, Metrics: m}
}

// sync runs one sync of the node on settled caches (ctrltest.Fixture.Sync)
// and keeps its Events for takeEvents.
func (e *env) sync(node string) time.Duration {
	e.t.Helper()
	e.events = append(e.events, e.Events()...) // Sync drops earlier ones
	r := e.Sync(e.c.Sync, node)
	if r.Err != nil {
		e.t.Fatalf("Sync(%s): %v", node, r.Err)
	}
	e.events = append(e.events, r.Events...)
	return r.After
}

// takeEvents returns the Events on Nodes (and Pods) recorded since the
// last call.
func (e *env) takeEvents() []string {
	out := append(e.events, e.Events()...)
	e.events = nil
	return out
}

// requestEvents returns the Events on FencingRequests recorded since the
// last call.
func (e *env) requestEvents() []string { return ctrltest.Drain(e.onRequests) }

// node reads the node from the API server.
func (e *env) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.Kube.CoreV1().Nodes().Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// updateNode changes the node in the API server (spec and status) and
// waits for the caches.
func (e *env) updateNode(name string, change func(*v1.Node)) {
	e.t.Helper()
	n := e.node(name)
	change(n)
	if _, err := e.Kube.CoreV1().Nodes().Update(e.Ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.Kube.CoreV1().Nodes().UpdateStatus(e.Ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// renewLease renews the node's Lease in the API server at the clock's now.
func (e *env) renewLease(name string) {
	e.t.Helper()
	if _, err := e.Kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(e.Ctx, testobj.Lease(name, e.Clock.Now()), metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// requests lists the node's FencingRequests from the API server.
func (e *env) requests(node string) []fencingv1alpha1.FencingRequest {
	e.t.Helper()
	l, err := e.Fencing.FencingV1alpha1().FencingRequests().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.DeleteFunc(l.Items, func(r fencingv1alpha1.FencingRequest) bool { return r.Spec.NodeName != node })
}

// request returns the node's only FencingRequest from the API server.
func (e *env) request(node string) *fencingv1alpha1.FencingRequest {
	e.t.Helper()
	rs := e.requests(node)
	if len(rs) != 1 {
		e.t.Fatalf("node %s has %d FencingRequests, want 1", node, len(rs))
	}
	return &rs[0]
}

// agentWrites updates the request's status as the fence agent does.
func (e *env) agentWrites(node string, change func(*fencingv1alpha1.FencingRequestStatus)) {
	e.t.Helper()
	r := e.request(node)
	change(&r.Status)
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().UpdateStatus(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// wantPhase checks the phase of the node's request.
func (e *env) wantPhase(node string, want fencingv1alpha1.FencingPhase) *fencingv1alpha1.FencingRequest {
	e.t.Helper()
	r := e.request(node)
	got := r.Status.Phase
	if got == "" {
		got = fencingv1alpha1.FencingPhasePending // a new request, as Decide reads it
	}
	if got != want {
		e.t.Fatalf("request %s is %q, want %q (conditions %+v)", r.Name, r.Status.Phase, want, r.Status.Conditions)
	}
	return r
}

// wantRequestCondition checks a condition of the node's request.
func (e *env) wantRequestCondition(node, typ string, status metav1.ConditionStatus, reason string) {
	e.t.Helper()
	r := e.request(node)
	for _, c := range r.Status.Conditions {
		if c.Type == typ {
			if c.Status != status || c.Reason != reason {
				e.t.Fatalf("request %s condition %s = %s/%s, want %s/%s (%s)", r.Name, typ, c.Status, c.Reason, status, reason, c.Message)
			}
			return
		}
	}
	e.t.Fatalf("request %s has no condition %s, want %s/%s", r.Name, typ, status, reason)
}

// wantNode checks the node's Fenceline conditions (type to status, absent
// when "") and which of Fenceline's taints and the out-of-service taint
// it carries.
func (e *env) wantNode(name string, conds map[string]v1.ConditionStatus, taints ...string) *v1.Node {
	e.t.Helper()
	n := e.node(name)
	for typ, want := range conds {
		got := v1.ConditionStatus("")
		for _, c := range n.Status.Conditions {
			if string(c.Type) == typ {
				got = c.Status
			}
		}
		if got != want {
			e.t.Errorf("node %s condition %s = %q, want %q", name, typ, got, want)
		}
	}
	var got []string
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint:
			got = append(got, t.Key)
		}
	}
	slices.Sort(got)
	slices.Sort(taints)
	if !slices.Equal(got, taints) {
		e.t.Errorf("node %s has taints %v, want %v", name, got, taints)
	}
	return n
}

const (
	triagedCond  = names.FencingTriagedCondition
	requiredCond = names.FencingRequiredCondition
	completeCond = names.FencingCompleteCondition
)

// cluster is three nodes of the policy "p" with the class "bmc": n1 dead
// (kubelet silent for a minute, its Lease 60 s old), n2 and n3 healthy, so
// that the storm guard sees a cluster it may fence in. extra are more
// objects, and options of n1.
func cluster(now time.Time, n1 []testobj.NodeOption, extra ...runtime.Object) []runtime.Object {
	objs := []runtime.Object{testobj.FencePolicy("p"), testobj.FenceClass("bmc")}
	objs = append(objs, testobj.Node("n1", append([]testobj.NodeOption{testobj.UnknownSince(now.Add(-time.Minute))}, n1...)...), testobj.Lease("n1", now.Add(-time.Minute)))
	for _, n := range []string{"n2", "n3"} {
		objs = append(objs, testobj.Node(n, testobj.ReadySince(now.Add(-time.Hour))), testobj.Lease(n, now))
	}
	return append(objs, extra...)
}

// clusterManual is cluster with a policy that asks for approval by hand:
// its requests wait in Triaged (approve admits them).
func clusterManual(now time.Time) []runtime.Object {
	objs := cluster(now, nil)
	objs[0] = testobj.FencePolicy("p", testobj.ManualApproval())
	return objs
}

// approve sets spec.approved on the node's request, as an operator does.
func (e *env) approve(node string) {
	e.t.Helper()
	r := e.request(node)
	r.Spec.Approved = ptr.To(true)
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().Update(e.Ctx, r, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// fenceToFenced drives n1 from no request to Fenced with its
// out-of-service taint, checking each step; taints are the taints of
// interest n1 had before (a human's out-of-service one).
func (e *env) fenceToFenced(taints ...string) *fencingv1alpha1.FencingRequest {
	e.t.Helper()
	e.sync("n1")
	r := e.wantPhase("n1", fencingv1alpha1.FencingPhasePending)
	if r.Labels[names.FencingRequestNodeLabel] != "n1" || r.Spec.Requester != RequesterController || r.Spec.NodeUID != "uid-n1" ||
		r.Spec.PolicyName != "p" || r.Spec.Reason != "LeaseExpired" || r.Spec.Action != fencingv1alpha1.FenceActionOff {
		e.t.Fatalf("created request = %+v %+v, want label %s=n1, requester controller, nodeUID uid-n1, policy p, reason LeaseExpired, action Off",
			r.Labels, r.Spec, names.FencingRequestNodeLabel)
	}

	// Settled and approved: triaged and admitted in one step.
	e.sync("n1")
	r = e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	if !meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.FencingRequestTriaged) || r.Status.StartTime == nil {
		e.t.Fatalf("request admitted with its triage: conditions %+v, start time %v, want Triaged=True and a start time", r.Status.Conditions, r.Status.StartTime)
	}
	if r.Status.BootIDAtFence != "boot-1" {
		e.t.Fatalf("bootIDAtFence = %q, want boot-1", r.Status.BootIDAtFence)
	}
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue, completeCond: ""}, append(taints, names.FencingTriagedTaint, names.FencingRequiredTaint)...)

	// Without an attempt read back Off, the request waits for the agent;
	// the note says so once the agent showed no sign of work for
	// agentNoteGrace (a note sooner would race its writes).
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, "")}
	})
	if after := e.sync("n1"); after <= 0 || after > agentNoteGrace {
		e.t.Fatalf("a request the agent just worked on: sync asks to come back after %v, want within %v", after, agentNoteGrace)
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	if c := meta.FindStatusCondition(e.request("n1").Status.Conditions, fencingv1alpha1.FencingRequestComplete); c != nil {
		e.t.Fatalf("condition Complete %s/%s written while the agent works", c.Status, c.Reason)
	}
	e.Clock.Step(agentNoteGrace)
	e.sync("n1")
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestComplete, metav1.ConditionFalse, ReasonAwaitingAgent)

	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = append(s.Attempts, testobj.FenceAttempt(1, "bmc", succeeded, off))
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	// FencingRequired stays True next to FencingComplete, and the node is
	// put out of service in the same step, unless a human did first or a
	// NetworkFence must be confirmed first.
	want := append(slices.Clone(taints), names.FencingTriagedTaint, names.FencingRequiredTaint)
	p, err := e.c.policies.Get("p")
	if err != nil {
		e.t.Fatal(err)
	}
	if !slices.Contains(taints, names.OutOfServiceTaint) && len(networkFenceMethods(p)) == 0 {
		want = append(want, names.OutOfServiceTaint)
	}
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue, completeCond: v1.ConditionTrue}, want...)

	e.sync("n1")
	return e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
}

// comesBack makes n1 Ready since a minute ago with the boot ID, its Lease
// renewed.
func (e *env) comesBack(bootID string) {
	e.updateNode("n1", func(n *v1.Node) {
		n.Status.NodeInfo.BootID = bootID
		for i, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				n.Status.Conditions[i] = v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
					LastTransitionTime: metav1.NewTime(e.Clock.Now().Add(-time.Minute)), LastHeartbeatTime: metav1.NewTime(e.Clock.Now())}
			}
		}
	})
	e.renewLease("n1")
}
