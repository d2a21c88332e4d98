package storagefence

import (
	"context"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	k8smetrics "k8s.io/component-base/metrics"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fence"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	fencinginformers "fenceline.io/fenceline/pkg/generated/informers/externalversions"
)

// store is a driver's fence store; lifted records the lifts, with the
// Lifted condition's reason the StorageFence had at the call.
type store struct {
	mu     sync.Mutex
	fences map[string][]*fencev1.Fence
	lifted []string
	seen   func(nodeID string) string
}

func (s *store) Fences(context.Context, *fencev1.ListFencesRequest) ([]*fencev1.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*fencev1.Fence
	for _, id := range slices.Sorted(maps.Keys(s.fences)) {
		out = append(out, s.fences[id]...)
	}
	return out, nil
}

func (s *store) LiftFences(_ context.Context, req *fencev1.LiftFenceRequest) ([]*fencev1.Fence, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.fences[req.GetNodeId()]
	delete(s.fences, req.GetNodeId())
	s.lifted = append(s.lifted, req.GetNodeId()+" "+s.seen(req.GetNodeId()))
	return out, nil
}

type env struct {
	metrics *Metrics
	t       *testing.T
	ctx     context.Context
	c       *Controller
	store   *store
	kube    *kubefake.Clientset
	fencing *fencingfake.Clientset
	events  *record.FakeRecorder
	stop    chan struct{}
}

func newEnv(t *testing.T, caps fence.Capabilities, kubeObjs ...runtime.Object) *env {
	t.Helper()
	e := &env{metrics: NewMetrics(k8smetrics.NewKubeRegistry()), t: t, ctx: context.Background(), kube: kubefake.NewClientset(kubeObjs...), fencing: fencingfake.NewSimpleClientset(), events: record.NewFakeRecorder(100), stop: make(chan struct{})}
	t.Cleanup(func() { close(e.stop) })
	e.store = &store{fences: map[string][]*fencev1.Fence{}, seen: func(id string) string {
		sf, err := e.fencing.FencingV1alpha1().StorageFences().Get(e.ctx, ObjectName(driver, id), metav1.GetOptions{})
		if err != nil {
			return "none"
		}
		if c := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted); c != nil {
			return c.Reason
		}
		return "none"
	}}
	sock := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if err := fence.RegisterFenceServer(srv, caps, e.store); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	kf := informers.NewSharedInformerFactory(e.kube, 0)
	ff := fencinginformers.NewSharedInformerFactory(e.fencing, 0)
	e.c, err = New(Config{Driver: driver, Conn: conn, Caps: caps, Fencing: e.fencing, Kube: e.kube, Recorder: e.events, Interval: time.Minute, Timeout: 5 * time.Second, Now: func() time.Time { return t0 }, Metrics: e.metrics},
		ff.Fencing().V1alpha1().StorageFences(), kf.Core().V1().Nodes(), kf.Storage().V1().CSINodes())
	if err != nil {
		t.Fatal(err)
	}
	kf.Start(e.stop)
	ff.Start(e.stop)
	if !cache.WaitForCacheSync(e.stop, e.c.synced...) {
		t.Fatal("caches did not sync")
	}
	return e
}

func (e *env) setFences(id string, fs ...*fencev1.Fence) {
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	if len(fs) == 0 {
		delete(e.store.fences, id)
		return
	}
	e.store.fences[id] = fs
}

// sync runs one key's sync once the caches hold what the API holds.
func (e *env) sync(key string) {
	e.t.Helper()
	e.waitCaches()
	if _, err := e.c.sync(e.ctx, key); err != nil {
		e.t.Fatalf("sync %q: %v", key, err)
	}
}

func (e *env) waitCaches() {
	e.t.Helper()
	waitFor(e.t, func() bool {
		list, _ := e.fencing.FencingV1alpha1().StorageFences().List(e.ctx, metav1.ListOptions{})
		cached, _ := e.c.fences.List(labels.Everything())
		return list != nil && sameVersions(list.Items, cached)
	})
}

func (e *env) object(id string) *fencingv1alpha1.StorageFence {
	e.t.Helper()
	sf, err := e.fencing.FencingV1alpha1().StorageFences().Get(e.ctx, ObjectName(driver, id), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return sf
}

func (e *env) requestLift(id string, confirmedGone bool) {
	e.t.Helper()
	sf := e.object(id)
	sf.Spec.Lift = &fencingv1alpha1.FenceLiftRequest{RequestedBy: "alice", Reason: "node replaced", ConfirmedGone: confirmedGone}
	sf.Generation++
	if _, err := e.fencing.FencingV1alpha1().StorageFences().Update(e.ctx, sf, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) lifted() []string {
	e.store.mu.Lock()
	defer e.store.mu.Unlock()
	return slices.Clone(e.store.lifted)
}

func (e *env) statusWrites() int {
	n := 0
	for _, a := range e.fencing.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func liftedReason(sf *fencingv1alpha1.StorageFence) string {
	if c := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

var allCaps = fence.Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true}

func TestListingPublishesAndRetires(t *testing.T) {
	e := newEnv(t, allCaps, testobj.CSINode("node-a", driver, "id-a"))
	e.setFences("id-a", volumes("vol-1"))
	e.setFences("id-b", &fencev1.Fence{NodeId: "id-b", AllVolumes: true, Details: "client blocklisted"})
	e.sync(listKey)

	a, b := e.object("id-a"), e.object("id-b")
	if a == nil || b == nil {
		t.Fatalf("objects a=%v b=%v, want one per fenced node ID", a, b)
	}
	if got := testutil.ToFloat64(e.metrics.fenced); got != 2 {
		t.Errorf("fenceline_attacher_storage_fenced_nodes = %v, want 2", got)
	}
	if evs := drain(e.events); len(evs) != 2 || !strings.Contains(evs[0], EventReported) {
		t.Errorf("events %q, want one %s per new StorageFence", evs, EventReported)
	}
	if a.Spec.Driver != driver || a.Spec.NodeID != "id-a" || a.Status.NodeName != "node-a" || a.Status.VolumeCount != 1 || a.Status.ListTime == nil {
		t.Errorf("id-a's object: spec %+v status %+v", a.Spec, a.Status)
	}
	if b.Status.NodeName != "" || !b.Status.AllVolumes || b.Status.Fences[0].Details != "client blocklisted" {
		t.Errorf("id-b's object: status %+v", b.Status)
	}

	writes := e.statusWrites()
	e.sync(listKey)
	if got := e.statusWrites(); got != writes {
		t.Errorf("a listing with nothing changed wrote %d status updates", got-writes)
	}

	e.setFences("id-a", volumes("vol-1", "vol-2"))
	e.setFences("id-b")
	e.sync(listKey)
	if a := e.object("id-a"); a == nil || a.Status.VolumeCount != 2 {
		t.Errorf("id-a's object after a second fence: %+v", a)
	}
	if b := e.object("id-b"); b != nil {
		t.Errorf("id-b's object kept after the storage lifted its fence: %+v", b.Status)
	}
	if got := testutil.ToFloat64(e.metrics.fenced); got != 1 {
		t.Errorf("fenceline_attacher_storage_fenced_nodes = %v, want 1", got)
	}
	if evs := drain(e.events); !slices.ContainsFunc(evs, func(ev string) bool { return strings.Contains(ev, EventGone) }) {
		t.Errorf("events %q, want %s for id-b", evs, EventGone)
	}
}

func TestLiftWaitsForEvidenceThenLifts(t *testing.T) {
	node := testobj.Node("node-a", testobj.UnknownSince(t0))
	e := newEnv(t, allCaps, testobj.CSINode("node-a", driver, "id-a"), node)
	e.setFences("id-a", volumes("vol-1"))
	e.sync(listKey)
	e.requestLift("id-a", false)
	e.sync(ObjectName(driver, "id-a"))
	if got := liftedReason(e.object("id-a")); got != "False/"+ReasonNodeNotReady {
		t.Fatalf("Lifted condition %q, want False/%s", got, ReasonNodeNotReady)
	}
	if len(e.lifted()) != 0 {
		t.Fatalf("lifted %v on a node that is not Ready", e.lifted())
	}
	if evs := drain(e.events); !slices.ContainsFunc(evs, func(ev string) bool { return strings.Contains(ev, "Warning "+EventLiftWaiting) }) {
		t.Errorf("events %q, want a Warning %s", evs, EventLiftWaiting)
	}

	// The node comes back, its kubelet using none of the fenced volumes.
	node = testobj.Node("node-a", testobj.ReadySince(t0))
	if _, err := e.kube.CoreV1().Nodes().Update(e.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		n, err := e.c.nodes.Get("node-a")
		return err == nil && len(n.Status.Conditions) > 0 && n.Status.Conditions[0].Status == v1.ConditionTrue
	})
	e.sync(ObjectName(driver, "id-a"))
	if got := e.lifted(); !slices.Equal(got, []string{"id-a " + reasonLifting}) {
		t.Fatalf("lifts %q, want one of id-a with the evidence recorded first (Lifted reason %s at the call)", got, reasonLifting)
	}
	if got := liftedReason(e.object("id-a")); got != "True/"+ReasonNodeSafe {
		t.Errorf("Lifted condition %q, want True/%s", got, ReasonNodeSafe)
	}
	if got := testutil.ToFloat64(e.metrics.lifts); got != 1 {
		t.Errorf("lifts_total{result=success} = %v, want 1", got)
	}

	// Done once: a fence set later is not lifted on the old request.
	e.setFences("id-a", volumes("vol-3"))
	e.sync(ObjectName(driver, "id-a"))
	if got := len(e.lifted()); got != 1 {
		t.Errorf("%d lifts, want the one request carried out once", got)
	}
}

func TestLiftChecksFreshNode(t *testing.T) {
	node := testobj.Node("node-a", testobj.ReadySince(t0))
	e := newEnv(t, allCaps, testobj.CSINode("node-a", driver, "id-a"), node)
	e.setFences("id-a", volumes("vol-1"))
	e.sync(listKey)
	// The API server has the node's kubelet using the fenced volume; the
	// cache has not seen it yet.
	e.kube.PrependReactor("get", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, testobj.Node("node-a", testobj.ReadySince(t0), inUseOpt("vol-1")), nil
	})
	e.requestLift("id-a", false)
	e.sync(ObjectName(driver, "id-a"))
	if len(e.lifted()) != 0 {
		t.Fatalf("lifted %v though the fresh Node lists the fenced volume in use", e.lifted())
	}
	if got := liftedReason(e.object("id-a")); got != "False/"+ReasonVolumesInUse {
		t.Errorf("Lifted condition %q, want False/%s", got, ReasonVolumesInUse)
	}
}

func TestLiftOfAGoneNodeNeedsConfirmation(t *testing.T) {
	e := newEnv(t, allCaps)
	e.setFences("id-a", volumes("vol-1"))
	e.sync(listKey)
	e.requestLift("id-a", false)
	e.sync(ObjectName(driver, "id-a"))
	if got := liftedReason(e.object("id-a")); got != "False/"+ReasonNodeUnknown || len(e.lifted()) != 0 {
		t.Fatalf("Lifted condition %q, lifts %v; want a wait for confirmation", got, e.lifted())
	}
	e.requestLift("id-a", true)
	e.sync(ObjectName(driver, "id-a"))
	if got := e.lifted(); len(got) != 1 {
		t.Fatalf("lifts %v, want the confirmed one", got)
	}
	e.sync(listKey)
	if sf := e.object("id-a"); sf != nil {
		t.Errorf("object kept after the lift: %+v", sf.Status)
	}
}

func TestLiftUnsupported(t *testing.T) {
	e := newEnv(t, fence.Capabilities{UnpublishFence: true, ListFences: true}, testobj.CSINode("node-a", driver, "id-a"), testobj.Node("node-a", testobj.ReadySince(t0)))
	e.setFences("id-a", volumes("vol-1"))
	e.sync(listKey)
	e.requestLift("id-a", false)
	e.sync(ObjectName(driver, "id-a"))
	if got := liftedReason(e.object("id-a")); got != "False/"+ReasonLiftUnsupported {
		t.Errorf("Lifted condition %q, want False/%s", got, ReasonLiftUnsupported)
	}
}

// waitFor polls cond until it holds, and fails the test after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("condition not met in 5s: %v", err)
	}
}

// sameVersions reports whether the cache holds what the API holds (the
// fake client keeps no resourceVersions).
func sameVersions(api []fencingv1alpha1.StorageFence, cached []*fencingv1alpha1.StorageFence) bool {
	if len(api) != len(cached) {
		return false
	}
	byName := map[string]*fencingv1alpha1.StorageFence{}
	for _, sf := range cached {
		byName[sf.Name] = sf
	}
	for i := range api {
		if c, ok := byName[api[i].Name]; !ok || !equality.Semantic.DeepEqual(c, &api[i]) {
			return false
		}
	}
	return true
}

// drain returns the Events recorded so far (pkg/attacher may not use
// internal/ctrltest, the controllers' fixture).
func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-r.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}
