package nodefencing

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/ctrltest"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/names"
)

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
	// Settled: each is triaged and admitted at once, if the guard admits;
	// the refused one is only triaged, and its admission asks again.
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
	e.wantPhase("n2", fencingv1alpha1.FencingPhaseTriaged)
	e.wantNode("n2", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: ""}, names.FencingTriagedTaint)

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
	after := e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Fatalf("a request was created for a node whose Lease the API server has renewed: %+v", rs)
	}
	// No Lease renewal enqueues the node: the fresh decision's recheck is
	// what looks at it again if it goes silent now.
	if after != 12500*time.Millisecond {
		t.Errorf("Sync after the fresh Lease kept the request back = recheck after %s, want 12.5s (when the node misses its next renewal)", after)
	}
}

// A healthy node: no request, and a recheck when it may miss its renewal.
func TestSyncHealthyNode(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	if after := e.sync("n2"); after != 12500*time.Millisecond {
		t.Errorf("Sync of a node whose Lease was just renewed = recheck after %s, want 12.5s", after)
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
			// Approval by hand keeps the request in Triaged.
			e := newEnv(t, now, clusterManual(now)...)
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
	e := newEnv(t, now, clusterManual(now)...)
	e.sync("n1")
	e.sync("n1") // Triaged, waiting for approval
	stale, err := e.c.gather("n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.approve("n1")
	e.sync("n1") // admitted: Fencing in the API server
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
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
	e := newEnv(t, now, clusterManual(now)...)
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

// A paused policy holds a dead node's fence: no request, one Warning Event
// however often the node is synced; unpaused, the request is created.
func TestSyncPausedPolicy(t *testing.T) {
	now := testobj.Epoch
	objs := cluster(now, nil)
	for i, o := range objs {
		if p, ok := o.(*fencingv1alpha1.FencePolicy); ok {
			objs[i] = testobj.FencePolicy(p.Name, testobj.Paused())
		}
	}
	e := newEnv(t, now, objs...)
	e.sync("n1")
	e.sync("n1")
	if rs := e.requests("n1"); len(rs) != 0 {
		t.Fatalf("a paused policy let a request be created: %+v", rs)
	}
	ctrltest.WantEvents(t, e.takeEvents(), "Warning "+EventPaused+" ")
	p, err := e.Fencing.FencingV1alpha1().FencePolicies().Get(e.Ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Paused = false
	if _, err := e.Fencing.FencingV1alpha1().FencePolicies().Update(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhasePending)
}

// A settled, approved request is triaged and admitted in one step: one
// round of fresh reads (the node among them), then the node's taints in
// one write made on the node read, its conditions in one write made on
// the node as that write left it, and the phase. A node changed between
// the read and the write is read again and decided again; one that came
// back meanwhile gets no mark.
func TestSyncTriageAndAdmitInOneStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change is the node as the API server has it when the taints
		// are written: nil for unchanged.
		change    func(*v1.Node)
		wantPhase fencingv1alpha1.FencingPhase
		wantGets  int
	}{
		{"unchanged node: no read of its own per write", nil, fencingv1alpha1.FencingPhaseFencing, 1},
		{"node changed, still dead: read and decided again", func(n *v1.Node) { n.Labels["touched"] = "yes" }, fencingv1alpha1.FencingPhaseFencing, 2},
		{"node back, its Lease renewed: no mark, no admission", func(n *v1.Node) {
			n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
			n.Labels["renew"] = "lease"
		}, fencingv1alpha1.FencingPhasePending, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := testobj.Epoch
			e := newEnv(t, now, cluster(now, nil)...)
			e.sync("n1")
			e.wantPhase("n1", fencingv1alpha1.FencingPhasePending)
			var nodeGets, condWrites int
			changed := tc.change == nil
			// The fake API server keeps no resourceVersions: these
			// reactors give every node write a new one, as a real one does.
			nodes := v1.SchemeGroupVersion.WithResource("nodes")
			rv := 100
			bump := func(n *v1.Node) { rv++; n.ResourceVersion = strconv.Itoa(rv) }
			stored := func() *v1.Node {
				o, err := e.Kube.Tracker().Get(nodes, "", "n1")
				if err != nil {
					t.Fatal(err)
				}
				return o.(*v1.Node).DeepCopy()
			}
			n := stored()
			bump(n)
			if err := e.Kube.Tracker().Update(nodes, n, ""); err != nil {
				t.Fatal(err)
			}
			e.Kube.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.(k8stesting.GetAction).GetName() == "n1" {
					nodeGets++
				}
				return false, nil, nil
			})
			e.Kube.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(k8stesting.UpdateAction).GetObject().(*v1.Node)
				if obj.ResourceVersion != stored().ResourceVersion {
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", nil)
				}
				if a.GetSubresource() == "status" {
					condWrites++
				} else if !changed {
					// Someone writes the node between the read and
					// the write: it is refused on its resourceVersion.
					changed = true
					cur := stored()
					if cur.Labels == nil {
						cur.Labels = map[string]string{}
					}
					tc.change(cur)
					if cur.Labels["renew"] != "" {
						lease := testobj.Lease("n1", e.Clock.Now())
						if err := e.Kube.Tracker().Update(coordinationv1.SchemeGroupVersion.WithResource("leases"), lease, v1.NamespaceNodeLease); err != nil {
							t.Fatal(err)
						}
					}
					bump(cur)
					if err := e.Kube.Tracker().Update(nodes, cur, ""); err != nil {
						t.Fatal(err)
					}
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", nil)
				}
				bump(obj)
				return false, nil, nil
			})
			_, _ = e.c.Sync(e.Ctx, "n1")
			e.Settle()
			r := e.wantPhase("n1", tc.wantPhase)
			if nodeGets != tc.wantGets {
				t.Errorf("node read %d times in the step, want %d", nodeGets, tc.wantGets)
			}
			if tc.wantPhase != fencingv1alpha1.FencingPhaseFencing {
				e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: "", requiredCond: ""})
				return
			}
			if condWrites != 1 {
				t.Errorf("%d status writes of the node, want 1 (both conditions at once)", condWrites)
			}
			e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue}, names.FencingTriagedTaint, names.FencingRequiredTaint)
			if !meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.FencingRequestTriaged) ||
				!meta.IsStatusConditionTrue(r.Status.Conditions, fencingv1alpha1.FencingRequestRequired) ||
				r.Status.StartTime == nil || r.Status.BootIDAtFence != "boot-1" {
				t.Errorf("request status %+v, want Triaged and Required True, a start time and boot ID boot-1", r.Status)
			}
		})
	}
}

// A triage decided on a cache that lags (the approval not seen yet) goes
// on with the admission on its own fresh reads when they show it may; when
// an admission ended while they were made, it reads again first.
func TestTriageGoesOnToTheAdmission(t *testing.T) {
	for _, tc := range []struct {
		name              string
		admittedMeanwhile bool
		wantPolicyReads   int
	}{
		{"no admission meanwhile: the triage's reads serve", false, 1},
		{"an admission ended meanwhile: read again", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := testobj.Epoch
			e := newEnv(t, now, clusterManual(now)...)
			e.sync("n1")
			e.wantPhase("n1", fencingv1alpha1.FencingPhasePending)
			stale, err := e.c.gather("n1", nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := Decide(stale); d.Step != StepTriage {
				t.Fatalf("cached decision %s, want Triage (the test proves nothing otherwise)", d.Step)
			}
			e.approve("n1")
			policyReads := 0
			e.Fencing.PrependReactor("get", "fencepolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
				policyReads++
				if tc.admittedMeanwhile && policyReads == 1 {
					e.c.admissions.Add(1)
				}
				return false, nil, nil
			})
			if _, err := e.c.act(e.Ctx, stale, Decide(stale)); err != nil {
				t.Fatal(err)
			}
			e.Settle()
			e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
			e.wantNode("n1", map[string]v1.ConditionStatus{triagedCond: v1.ConditionTrue, requiredCond: v1.ConditionTrue}, names.FencingTriagedTaint, names.FencingRequiredTaint)
			if policyReads != tc.wantPolicyReads {
				t.Errorf("the storm guard's policy read %d times, want %d", policyReads, tc.wantPolicyReads)
			}
		})
	}
}

// The Fenced step puts the node out of service at once, and the fence
// intent is on every VolumeAttachment of the node before the taint is
// written (intent before cause).
func TestFencedStepRecordsIntentsBeforeTheTaint(t *testing.T) {
	now := testobj.Epoch
	va := testobj.VA("va-1", "disk.example.com", "pv-1", "n1")
	e := newEnv(t, now, cluster(now, nil, va)...)
	var taintWrites int
	var intentAtTaint string
	e.Kube.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n := a.(k8stesting.UpdateAction).GetObject().(*v1.Node)
		if a.GetSubresource() != "" || !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == names.OutOfServiceTaint }) {
			return false, nil, nil
		}
		taintWrites++
		o, err := e.Kube.Tracker().Get(storagev1.SchemeGroupVersion.WithResource("volumeattachments"), "", "va-1")
		if err != nil {
			t.Fatal(err)
		}
		intentAtTaint = o.(*storagev1.VolumeAttachment).Annotations[names.FenceIntentAnnotation]
		return false, nil, nil
	})
	e.fenceToFenced()
	if taintWrites == 0 {
		t.Fatal("the out-of-service taint was never written")
	}
	if intentAtTaint == "" {
		t.Errorf("the out-of-service taint was written before the fence intent on va-1")
	}
}

// The conditions of an admission are written beside its phase: decided
// again after a conflict, they go ahead once that phase landed (the step is
// no longer "admit" then, and they record it), and never on a request that
// did not reach it.
func TestConditionsBesideTheirPhase(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.sync("n1")
	pending := e.wantPhase("n1", fencingv1alpha1.FencingPhasePending)
	changed := e.node("n1").DeepCopy()
	changed.ResourceVersion = "another version" // read after a conflict
	admitted := landedIn(pending, fencingv1alpha1.FencingPhaseFencing)
	// The rows before the admission come first: the admission is synced
	// once, before the first row after it.
	for _, tc := range []struct {
		name string
		// admitted: the request's admission landed before the check.
		admitted bool
		pending  pendingWrite
		want     bool
	}{
		{"the step not taken yet: decided again, the same step", false, admitted, true},
		{"nothing pending: decided again, the same step", false, nil, true},
		{"the admission landed: the conditions record it", true, admitted, true},
		{"the admission landed, nothing pending: the step changed", true, nil, false},
		{"another phase landed: the step changed", true, landedIn(pending, fencingv1alpha1.FencingPhaseTriaged), false},
	} {
		if tc.admitted && e.request("n1").Status.Phase != fencingv1alpha1.FencingPhaseFencing {
			e.sync("n1")
			e.wantPhase("n1", fencingv1alpha1.FencingPhaseFencing)
		}
		t.Run(tc.name, func(t *testing.T) {
			ok, why := e.c.decidedOnAs(e.Ctx, e.node("n1"), pending, StepTriageAdmit, tc.pending)(changed)
			if ok != tc.want {
				t.Errorf("check = %v (%s), want %v", ok, why, tc.want)
			}
		})
	}
}

// TestSyncWaitsForTheRequestItCreated: a sync on a cache that does not show
// the request this controller just created yet reads nothing and waits for
// its add event; once the cache shows it, or createdWait passed, syncs go
// on, and no second request is created either way.
func TestSyncWaitsForTheRequestItCreated(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil)...)
	e.sync("n1")
	created := e.request("n1")
	store := e.FencingInformers.Fencing().V1alpha1().FencingRequests().Informer().GetStore()
	cached, ok, err := store.GetByKey(created.Name)
	if err != nil || !ok {
		t.Fatalf("the cache never showed the request: %v", err)
	}
	if err := store.Delete(cached); err != nil { // the cache lags behind the create
		t.Fatal(err)
	}
	calls := len(e.Fencing.Actions()) + len(e.Kube.Actions())
	after, err := e.c.Sync(e.Ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if after != staleRequestRecheck {
		t.Errorf("recheck after %s while the cache lags behind the create, want %s", after, staleRequestRecheck)
	}
	if n := len(e.Fencing.Actions()) + len(e.Kube.Actions()) - calls; n != 0 {
		t.Errorf("%d API calls while waiting for the cache to show the request created, want none", n)
	}

	e.Clock.SetTime(now.Add(createdWait))
	if _, err := e.c.Sync(e.Ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Fencing.Actions()) + len(e.Kube.Actions()) - calls; n == 0 {
		t.Error("still waiting for the cache after createdWait")
	}
	if rs := e.requests("n1"); len(rs) != 1 {
		t.Errorf("%d requests after a sync on a lagging cache, want the one created", len(rs))
	}
}

func TestCreatedPending(t *testing.T) {
	now := testobj.Epoch
	mine := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{UID: "mine"}}
	other := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{UID: "other"}}
	tests := []struct {
		name      string
		marked    bool
		cached    []*fencingv1alpha1.FencingRequest
		at        time.Duration
		want      bool
		wantAfter bool // pending again on an empty cache right after
	}{
		{"nothing created", false, nil, 0, false, false},
		{"created, the cache shows another request of the node", true, []*fencingv1alpha1.FencingRequest{other}, time.Second, true, true},
		{"created, the cache shows it: caught up, the mark goes", true, []*fencingv1alpha1.FencingRequest{other, mine}, time.Second, false, false},
		{"created createdWait ago, never shown: the mark goes", true, nil, createdWait, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c created
			if tt.marked {
				c.mark("n1", mine.UID, now)
			}
			cached := func(reqs []*fencingv1alpha1.FencingRequest) func(string) ([]*fencingv1alpha1.FencingRequest, error) {
				return func(string) ([]*fencingv1alpha1.FencingRequest, error) { return reqs, nil }
			}
			if got := c.pending("n1", now.Add(tt.at), cached(tt.cached)); got != tt.want {
				t.Errorf("pending = %v, want %v", got, tt.want)
			}
			if got := c.pending("n1", now.Add(tt.at), cached(nil)); got != tt.wantAfter {
				t.Errorf("pending again = %v, want %v", got, tt.wantAfter)
			}
			if c.pending("n2", now, func(string) ([]*fencingv1alpha1.FencingRequest, error) {
				t.Error("the cache read for a node without a mark")
				return nil, nil
			}) {
				t.Error("another node is pending")
			}
		})
	}
}
