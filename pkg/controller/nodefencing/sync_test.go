package nodefencing

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
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
	f := ctrltest.New(t, now, objs...)
	requests := record.NewFakeRecorder(100)
	c, err := New(Config{
		Informers: f.Informers, NodeLeases: f.NodeLeases, Fencing: f.FencingInformers, Client: f.Fencing,
		Actuator: f.Actuator, Recorder: requests, Metrics: f.Metrics,
	})
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
	return &env{Fixture: f, t: t, c: c, onRequests: requests}
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

	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: "", completeCond: ""}, append(taints, names.FencingTriagedTaint)...)

	e.sync("n1")
	r = e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	if r.Status.BootIDAtFence != "boot-1" {
		e.t.Fatalf("bootIDAtFence = %q, want boot-1", r.Status.BootIDAtFence)
	}
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue, completeCond: ""}, append(taints, names.FencingTriagedTaint, names.FencingRequiredTaint)...)

	// Without an attempt read back Off, the request waits for the agent.
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, "")}
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestComplete, metav1.ConditionFalse, ReasonAwaitingAgent)

	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = append(s.Attempts, testobj.FenceAttempt(1, "bmc", succeeded, off))
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	// FencingRequired stays True next to FencingComplete.
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue, completeCond: v1.ConditionTrue}, append(taints, names.FencingTriagedTaint, names.FencingRequiredTaint)...)

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

func TestSyncLifecycle(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	r := e.fenceToFenced()
	n := e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionTrue},
		names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	if got := n.Annotations[names.OutOfServiceOwnerAnnotation]; got != string(r.UID) || r.UID == "" {
		t.Fatalf("out-of-service owner annotation = %q, want the request's UID %q", got, r.UID)
	}
	if oos := n.Spec.Taints[slices.IndexFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == names.OutOfServiceTaint })]; oos.Effect != v1.TaintEffectNoExecute {
		t.Errorf("out-of-service taint = %+v, want effect NoExecute", oos)
	}

	// Still down: nothing changes.
	e.Clock.Step(time.Minute)
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	if got, want := testutil.ToFloat64(e.Metrics.FencedSince.WithLabelValues("n1")), float64(e.request("n1").Status.FencedTime.UnixNano())/1e9; got != want {
		t.Errorf("fenced since = %v, want the request's fencedTime %v", got, want)
	}

	e.comesBack("boot-2")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)

	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	e.sync("n1")
	if n := testutil.CollectAndCount(e.Metrics.FencedSince); n != 0 {
		t.Errorf("a recovered node keeps %d fenced-since series, want none", n)
	}
	n = e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse, requiredCond: v1.ConditionFalse, completeCond: v1.ConditionFalse})
	if _, ok := n.Annotations[names.OutOfServiceOwnerAnnotation]; ok {
		t.Errorf("owner annotation left after recovery: %v", n.Annotations)
	}

	// Healthy, the request terminal: no new request.
	e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 1 {
		t.Errorf("after recovery the node has %d requests, want 1", len(rs))
	}
}

func TestSyncSameBootIDStaysFenced(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.fenceToFenced()
	e.comesBack("boot-1")
	// One renewal and one Ready report may have been sent before the
	// power-off: a second renewal is what proves the node ran after it.
	e.Clock.Step(10 * time.Second)
	e.renewLease("n1")
	for range 2 {
		e.sync("n1")
		e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	}
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonLyingFence)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionTrue, names.LyingFenceCondition: v1.ConditionTrue},
		names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
}

func TestSyncKeepsAHumansOutOfServiceTaint(t *testing.T) {
	now := testobj.Epoch
	human := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, now.Add(-time.Minute))
	e := newEnv(t, now, cluster(now, []testobj.NodeOption{human})...)
	e.fenceToFenced(names.OutOfServiceTaint)
	// The taint was there: Fenceline adds none and claims none.
	n := e.wantNode("n1", nil, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
	if _, ok := n.Annotations[names.OutOfServiceOwnerAnnotation]; ok {
		t.Fatalf("Fenceline claimed a human's out-of-service taint: %v", n.Annotations)
	}
	e.comesBack("boot-2")
	e.sync("n1")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionFalse}, names.OutOfServiceTaint)
}

func TestSyncVolumeAttachmentBlocksRecovery(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.fenceToFenced()
	e.comesBack("boot-2")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)

	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	if _, err := e.Kube.StorageV1().VolumeAttachments().Create(e.Ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Settle()
	for range 2 {
		e.sync("n1")
		e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	}
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestRecovered, metav1.ConditionFalse, ReasonAttachmentsRemain)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionTrue}, names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)

	if err := e.Kube.StorageV1().VolumeAttachments().Delete(e.Ctx, "va-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Settle()
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: v1.ConditionFalse})
}

// A VolumeAttachment the API server has and the cache not yet: the
// write-time recheck lists them fresh, and nothing is unfenced.
func TestSyncRecoverRechecksVolumeAttachments(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.fenceToFenced()
	e.comesBack("boot-2")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)

	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	e.Kube.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &storagev1.VolumeAttachmentList{Items: []storagev1.VolumeAttachment{*va}}, nil
	})
	if _, err := e.c.Sync(e.Ctx, "n1"); !actuator.IsDecisionChanged(err) {
		t.Fatalf("Sync with a VolumeAttachment only the API server has = %v, want the decision changed on fresh data", err)
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovering)
	e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue, completeCond: v1.ConditionTrue},
		names.FencingTriagedTaint, names.FencingRequiredTaint, names.OutOfServiceTaint)
}

// Two dead nodes of five under maxConcurrentFencing 1: one is fenced, the
// other waits in Triaged.
func TestSyncStormGuardAdmitsOneAtATime(t *testing.T) {
	now := testobj.Epoch
	objs := []runtime.Object{testobj.FencePolicy("p", testobj.MaxConcurrentFencing(1)), testobj.FenceClass("bmc")}
	for _, n := range []string{"n1", "n2"} {
		objs = append(objs, testobj.Node(n, testobj.UnknownSince(now.Add(-time.Minute))), testobj.Lease(n, now.Add(-time.Minute)))
	}
	for _, n := range []string{"n3", "n4", "n5"} {
		objs = append(objs, testobj.Node(n, testobj.ReadySince(now.Add(-time.Hour))), testobj.Lease(n, now))
	}
	e := newEnv(t, now, objs...)
	for range 2 {
		e.sync("n1")
		e.sync("n2")
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
	e.wantPhase("n2", fencingv1alpha1.FencingPhaseTriaged)

	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	if after := e.sync("n2"); after <= 0 {
		t.Errorf("a refused admission asks for no recheck (%s)", after)
	}
	e.sync("n2")
	e.wantPhase("n2", fencingv1alpha1.FencingPhaseTriaged)
	e.wantRequestCondition("n2", fencingv1alpha1.FencingRequestRequired, metav1.ConditionFalse, "MaxConcurrentFencing")
	if got := testutil.ToFloat64(e.Metrics.StormGuardRefusals.WithLabelValues("MaxConcurrentFencing")); got < 1 {
		t.Errorf("storm guard refusals (MaxConcurrentFencing) = %v, want at least 1", got)
	}
	e.wantNode("n2", map[string]v1.ConditionStatus{requiredCond: ""}, names.FencingTriagedTaint)

	// Once n1 is fenced its slot is free.
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, off)}
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	e.sync("n2")
	e.wantPhase("n2", fencingv1alpha1.FencingPhaseFencing)
}

// The Lease renewed in the API server after the cached decision: the
// write-time decision sees it and creates no request.
func TestSyncCreateRechecksTheLease(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	renewed := testobj.Lease("n1", now)
	e.Kube.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() != "n1" {
			return false, nil, nil
		}
		return true, renewed.DeepCopy(), nil
	})
	cached, err := e.c.leases.Get("n1")
	if err != nil || !cached.Spec.RenewTime.Time.Before(now.Add(-30*time.Second)) {
		t.Fatalf("the cache should still hold the stale Lease: %+v, %v", cached, err)
	}
	e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Fatalf("a request was created for a node whose Lease the API server has renewed: %+v", rs)
	}
}

// A healthy node: no request, and a recheck when its Lease may go stale.
func TestSyncHealthyNode(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	if after := e.sync("n2"); after != 20*time.Second {
		t.Errorf("Sync of a node whose Lease was just renewed = recheck after %s, want 20s", after)
	}
	if rs := e.requests("n2"); len(rs) != 0 {
		t.Errorf("healthy node got requests: %+v", rs)
	}
}

// An automatic request whose node came back before it was admitted is
// cancelled, and Fenceline's triage marks go; an admission the cancel cut
// short (FencingRequired written, its taint refused because the decision
// changed) leaves no FencingRequired True behind.
func TestSyncCancelsWhenTheNodeComesBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cutShort  bool
		wantConds map[string]v1.ConditionStatus
	}{
		{"triaged", false, map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse}},
		{"admission cut short", true, map[string]v1.ConditionStatus{triagedCond: v1.ConditionFalse, requiredCond: v1.ConditionFalse}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := testobj.Epoch
			e := newEnv(t, now, cluster(now, nil)...)
			e.sync("n1")
			e.sync("n1")
			e.wantPhase("n1", fencingv1alpha1.FencingPhaseTriaged)
			if tc.cutShort {
				e.updateNode("n1", func(n *v1.Node) {
					applyNodeConditions(n, metav1.NewTime(e.Clock.Now()), nodeCondition(names.FencingRequiredCondition, v1.ConditionTrue, "LeaseExpired", "approved"))
				})
			}
			e.comesBack("boot-1")
			e.sync("n1")
			e.wantPhase("n1", fencingv1alpha1.FencingPhaseCancelled)
			e.wantNode("n1", tc.wantConds)
		})
	}
}

// A request in Fencing whose node came back is fenced anyway.
func TestSyncFencingIsNotCancelled(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	for range 3 {
		e.sync("n1")
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	e.comesBack("boot-1")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, off)}
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
}

// failedRounds at maxAttempts fails the request; the node keeps its marks.
func TestSyncFailsAfterMaxAttempts(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	for range 3 {
		e.sync("n1")
	}
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) { s.FailedRounds = 5 })
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFailed)
	e.wantNode("n1", map[string]v1.ConditionStatus{requiredCond: v1.ConditionTrue, completeCond: ""}, names.FencingTriagedTaint, names.FencingRequiredTaint)
	// The failed request blocks a new one for the same boot.
	e.sync("n1")
	if got := testutil.ToFloat64(e.Metrics.FencingFailed.WithLabelValues("n1")); got != 1 {
		t.Errorf("fencing failed gauge = %v, want 1", got)
	}
	if rs := e.requests("n1"); len(rs) != 1 {
		t.Errorf("after a failure the node has %d requests, want 1", len(rs))
	}
}

// A node recreated while its request is Fencing gets nothing of the
// request when the old machine's fence is proven.
func TestFencedLeavesARecreatedNodeAlone(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	for range 3 {
		e.sync("n1") // Fencing
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	if err := e.Kube.CoreV1().Nodes().Delete(e.Ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Kube.CoreV1().Nodes().Create(e.Ctx, testobj.Node("n1", testobj.ReadySince(now), testobj.BootID("boot-new"), testobj.NodeUID("uid-n1-new")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.renewLease("n1")
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, off)}
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	e.wantNode("n1", map[string]v1.ConditionStatus{completeCond: "", requiredCond: "", triagedCond: ""})
}

// A cache that still shows Triaged after the admission (the API server has
// Fencing) never cancels the request: the phase is checked on the fresh
// request.
func TestCancelNeverCancelsAFencingRequest(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.sync("n1")
	e.sync("n1") // Triaged
	stale, err := e.c.gather("n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.sync("n1") // admitted: Fencing in the API server
	if err := e.Kube.CoreV1().Nodes().Delete(e.Ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Node = nil // the node's deletion seen, the request's update not yet
	d := Decide(stale)
	if d.Step != StepCancel {
		t.Fatalf("stale Decide = %s, want Cancel (the test proves nothing otherwise)", d.Step)
	}
	if _, err := e.c.act(e.Ctx, stale, d); err != nil {
		t.Fatal(err)
	}
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
}

// A second open request of the node (a human's, or a retried create) is
// cancelled before it is admitted; the oldest is followed.
func TestDuplicateRequestCancelled(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.sync("n1") // the controller's request
	first := e.requests("n1")
	if len(first) != 1 {
		t.Fatalf("%d requests after the first sync, want 1", len(first))
	}
	dup := testobj.FencingRequest("n1", testobj.ByUser("ada"), testobj.Approved(true))
	dup.Name = "n1-dup" // sorts after the generated name at the same creation time
	if _, err := e.Fencing.FencingV1alpha1().FencingRequests().Create(e.Ctx, dup, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Settle()
	e.sync("n1")
	for _, r := range e.requests("n1") {
		want := fencingv1alpha1.FencingPhaseTriaged
		if r.Name == "n1-dup" {
			want = fencingv1alpha1.FencingPhaseCancelled
		}
		if r.Status.Phase != want {
			t.Errorf("request %s is %q, want %q", r.Name, r.Status.Phase, want)
		}
	}
}
