package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/mock-driver/faults"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/world"
)

// TestNetworkFenceFailover: a FencePolicy with the storage fence method
// NetworkFence, on a cluster where the mock driver serves csi-addons
// network fencing through the stand-in csi-addons controller. A node hangs
// while its database writes. Once its power-off is proven, Fenceline
// creates a NetworkFence for its InternalIP; while the driver refuses the
// fence, the out-of-service taint waits (storageFence Required) and the
// request says why. Once the fence succeeds, the node goes out of service
// and the pod moves; the array holds the node's address fenced and refuses
// its zombie writes by it. Powered on, the node is unfenced only after the
// NetworkFence is lifted and deleted, and the array fences nothing.
func TestNetworkFenceFailover(t *testing.T) {
	t.Parallel()
	s := &fencingScenario{scenario: newScenario(t, world.Options{Fencing: true, NetworkFence: true, ZombieWrites: true})}
	setup, err := s.w.SetUpFencing(s.ctx, world.BMCRedfish, s.timeline, func(p *fencingv1alpha1.FencePolicy) {
		p.Spec.StorageFenceMethods = []fencingv1alpha1.StorageFenceMethod{{Method: fencingv1alpha1.StorageFenceNetworkFence,
			NetworkFence: &fencingv1alpha1.NetworkFenceMethod{NetworkFenceClassName: world.NetworkFenceClassName}}}
	})
	must(t, err)
	t.Cleanup(setup.Close)
	s.setup = setup
	nodeA := s.startDB().Spec.NodeName
	cidr := world.NodeIP(slices.Index(s.w.Nodes, nodeA)) + "/32"
	dyn, err := dynamic.NewForConfig(s.w.Cluster.AdminConfig())
	must(t, err)
	fences := networkfence.API{Client: dyn}

	// The driver refuses every fence until told otherwise.
	must(t, s.w.SetDriverFaults(s.ctx, faults.FailNext("FenceClusterNetwork", 1000, codes.Unavailable)))
	s.hang(nodeA)
	req, err := setup.WaitRequestPhase(s.ctx, nodeA, fencingv1alpha1.FencingPhaseFenced, fenceTimeout)
	must(t, err)
	s.timeline.Add(time.Now(), "FencingRequest %s seen Fenced", req.Name)
	fencing, err := versioned.NewForConfig(s.w.Cluster.AdminConfig())
	must(t, err)
	getReq := func(ctx context.Context) (*fencingv1alpha1.FencingRequest, error) {
		return fencing.FencingV1alpha1().FencingRequests().Get(ctx, req.Name, metav1.GetOptions{})
	}
	must(t, world.WaitFor(s.ctx, fenceTimeout, "the request waiting on its failed NetworkFence", func(ctx context.Context) (bool, error) {
		r, err := getReq(ctx)
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(r.Status.Conditions, fencingv1alpha1.FencingRequestRecovered)
		return c != nil && c.Reason == nodefencing.ReasonNetworkFenceFailed, nil
	}))
	node, err := s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{})
	must(t, err)
	if nodeutil.HasTaint(node, names.OutOfServiceTaint) {
		t.Fatalf("node %s is out of service while its NetworkFence failed (storageFence Required)", nodeA)
	}
	nf := s.requestFences(fences, req, 1)[0]
	if !nf.Failed() || !slices.Equal(nf.CIDRs, []string{cidr}) || nf.Class != world.NetworkFenceClassName {
		t.Fatalf("NetworkFence = %+v, want Failed for %s through %s", nf, cidr, world.NetworkFenceClassName)
	}
	s.timeline.Add(time.Now(), "NetworkFence %s failed, the out-of-service taint waits", nf.Name)

	must(t, s.w.SetDriverFaults(s.ctx))
	moved, err := s.w.WaitRunning(s.ctx, s.ns, "db-0", nodeA, failoverTimeout)
	must(t, err)
	s.timeline.Add(time.Now(), "db-0 Running on %s", moved.Spec.NodeName)
	s.waitAcceptedWrite(moved.Spec.NodeName, time.Now())
	s.assertInvariant(nodeA, moved.Spec.NodeName)
	// The storage recorded the network fence before the node went out of
	// service, and accepted no write of the node after it.
	recs := s.audit()
	i := slices.IndexFunc(recs, func(r audit.Record) bool { return r.Method == "FenceClusterNetwork" && r.Code == codes.OK.String() })
	if i < 0 {
		t.Fatal("the driver recorded no successful FenceClusterNetwork")
	}
	fencedAt := recs[i].Time
	for _, r := range recs[i:] {
		if r.Method == "Write" && r.NodeID == nodeA && r.Code == codes.OK.String() {
			t.Fatalf("a write of %s accepted at %s, after the network fence at %s", nodeA, r.Time, fencedAt)
		}
	}
	node, err = s.w.Cluster.Client().CoreV1().Nodes().Get(s.ctx, nodeA, metav1.GetOptions{})
	must(t, err)
	if ti := slices.IndexFunc(node.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == names.OutOfServiceTaint }); ti < 0 ||
		node.Spec.Taints[ti].TimeAdded.Time.Before(fencedAt.Truncate(time.Second)) {
		t.Fatalf("node %s taints %v: want the out-of-service taint, added after the network fence at %s", nodeA, node.Spec.Taints, fencedAt)
	}
	if got := s.requestFences(fences, req, 1)[0]; !got.Fenced() {
		t.Fatalf("db-0 moved, NetworkFence = %+v, want confirmed", got)
	}
	arr, err := s.w.ArrayNetworkFences(s.ctx)
	must(t, err)
	if !slices.Contains(arr, cidr) {
		t.Fatalf("the array fences %v, want %s among them", arr, cidr)
	}
	must(t, world.WaitFor(s.ctx, failoverTimeout, "a zombie write of "+nodeA+" refused by the network fence", func(context.Context) (bool, error) {
		for _, r := range s.audit() {
			if r.Method == "Write" && r.NodeID == nodeA && r.Code == codes.PermissionDenied.String() && strings.Contains(r.Message, cidr) {
				return true, nil
			}
		}
		return false, nil
	}))
	r, err := getReq(s.ctx)
	must(t, err)
	if i := slices.IndexFunc(r.Status.Storage, func(st fencingv1alpha1.StorageFenceStatus) bool { return st.Driver == world.DriverName }); i < 0 ||
		!slices.Contains(r.Status.Storage[i].NetworkFences, nf.Name) || !r.Status.Storage[i].Fenced {
		t.Fatalf("status.storage = %+v, want %s fenced with NetworkFence %s", r.Status.Storage, world.DriverName, nf.Name)
	}

	s.powerOnUnfenced(nodeA)
	// The recovery lifts the NetworkFence before anything else: by the
	// time the request is Recovered, it is gone and the array fences
	// nothing.
	s.requestFences(fences, req, 0)
	if arr, err := s.w.ArrayNetworkFences(s.ctx); err != nil || len(arr) != 0 {
		t.Fatalf("after the recovery the array fences %v (err %v), want nothing", arr, err)
	}
}

// requestFences returns the request's NetworkFences, failing unless there
// are want of them.
func (s *fencingScenario) requestFences(r networkfence.Reader, req *fencingv1alpha1.FencingRequest, want int) []networkfence.Fence {
	s.t.Helper()
	got, err := r.FencesOf(s.ctx, req.UID)
	must(s.t, err)
	if len(got) != want {
		s.t.Fatalf("%d NetworkFences of FencingRequest %s, want %d: %+v", len(got), req.Name, want, got)
	}
	return got
}
