package kubectlplugin

import (
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	"fenceline.io/fenceline/pkg/names"
)

const driver = "block.csi.example.com"

// t0 is when the fixtures' node died; now is when the plugin looks.
var (
	t0  = testobj.Epoch
	now = t0.Add(5 * time.Minute)
)

// fencingRequest is the controller's request for the node in the phase,
// with policy "workers", the boot ID "boot-1" at fence time, Complete since
// t0+30s.
func fencingRequest(node string, phase fencingv1alpha1.FencingPhase) *fencingv1alpha1.FencingRequest {
	// Created and labelled as node-fencing creates its requests, which the
	// plugin lists by node.
	asCreated := func(r *fencingv1alpha1.FencingRequest) {
		r.CreationTimestamp = metav1.NewTime(t0.Add(20 * time.Second))
		r.Labels = map[string]string{names.FencingRequestNodeLabel: node}
	}
	return testobj.FencingRequest(node, asCreated, testobj.RequestName(node+"-abcde"), testobj.ForPolicy("workers"),
		testobj.InPhase(phase), testobj.BootIDAtFence("boot-1"),
		testobj.RequestCondition(metav1.Condition{Type: "Complete", Status: metav1.ConditionTrue, Reason: "Level1Verified",
			Message: "every fence class of level 1 read the power back Off", LastTransitionTime: metav1.NewTime(t0.Add(30 * time.Second))}))
}

// fencedNode is a node that node-fencing fenced and put out of service for
// fencingRequest(name, ...).
func fencedNode(name string, opts ...testobj.NodeOption) *v1.Node {
	// The Ready condition first: options that set it replace every
	// condition.
	first := append([]testobj.NodeOption{testobj.UnknownSince(t0)}, opts...)
	fenced := []testobj.NodeOption{
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, t0.Add(31*time.Second)),
		testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, t0.Add(25*time.Second)),
		testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(30*time.Second)),
		testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-req-"+name),
	}
	return testobj.Node(name, append(first, fenced...)...)
}

// fencedVA is a VolumeAttachment of the node being detached, with a fence
// record.
func fencedVA(name, pv, node string) *storagev1.VolumeAttachment {
	va := testobj.VA(name, driver, pv, node)
	del := metav1.NewTime(t0.Add(32 * time.Second))
	va.DeletionTimestamp = &del
	va.Annotations = map[string]string{names.FenceRecordAnnotation: fencing.NewRecord(cutoff.ReasonOutOfService, "csi-"+node, t0.Add(33*time.Second)).Encode()}
	return va
}

// withInternalIP gives the node the address.
func withInternalIP(ip string) testobj.NodeOption {
	return func(n *v1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
}

// world is a cluster with a fenced node "dead" at 10.0.0.7 (its pod web-0
// stuck terminating, its volume being detached fenced), a healthy node "live",
// a safe-detach driver served by a fence-capable attacher, and one Event.
func world() (kube []runtime.Object, fenceObjs []runtime.Object) {
	dead := fencedNode("dead", withInternalIP("10.0.0.7"))
	live := testobj.Node("live", testobj.ReadySince(t0.Add(-time.Hour)))
	pod := testobj.Pod("db", "web-0", testobj.OnNode("dead"), testobj.Terminating(t0.Add(40*time.Second)), testobj.Claim("data", "data-web-0"))
	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "dead.1"},
		InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "dead"},
		Reason:         "NodeFenced", Message: "FencingRequest dead-abcde: every fence class of level 1 read the power back Off",
		Type: v1.EventTypeNormal, Source: v1.EventSource{Component: "fenceline-controller"}, Count: 1,
		FirstTimestamp: metav1.NewTime(t0.Add(30 * time.Second)), LastTimestamp: metav1.NewTime(t0.Add(30 * time.Second)),
	}
	other := ev.DeepCopy()
	other.Name, other.Source.Component, other.Reason = "dead.2", "kubelet", "Starting"
	kube = []runtime.Object{dead, live, pod,
		testobj.PVC("db", "data-web-0", "pv-1"), testobj.CSIPV("pv-1", driver, "vol-1", v1.ReadWriteOnce),
		testobj.CSIDriver(driver, map[string]string{names.SafeDetachAnnotation: "true"}),
		testobj.CSIDriver("nfs.example.com", nil),
		testobj.Heartbeat("storage", driver, now.Add(-5*time.Second)),
		fencedVA("va-1", "pv-1", "dead"), testobj.VA("va-2", driver, "pv-2", "live"),
		ev, other,
	}
	workers := testobj.FencePolicy("workers")
	workers.Status.Coverage = &fencingv1alpha1.FenceCoverage{SelectedNodes: 2, UncoveredNodes: 1, Uncovered: []fencingv1alpha1.UncoveredNode{
		{Node: "live", Reason: "CredentialsRejected", Message: "endpoint bmc: 401 Unauthorized"},
	}}
	fenceObjs = []runtime.Object{fencingRequest("dead", fencingv1alpha1.FencingPhaseFenced), workers, testobj.FenceClass("bmc"), storageFence("dead")}
	return kube, fenceObjs
}

// storageFence is what the driver's attacher published of the storage's
// fence against the node: one volume, read at t0+40s.
func storageFence(node string) *fencingv1alpha1.StorageFence {
	listed := metav1.NewTime(t0.Add(40 * time.Second))
	fencedAt := metav1.NewTime(t0.Add(35 * time.Second))
	return &fencingv1alpha1.StorageFence{
		ObjectMeta: metav1.ObjectMeta{Name: "sf-" + node},
		Spec:       fencingv1alpha1.StorageFenceSpec{Driver: driver, NodeID: "csi-" + node},
		Status: fencingv1alpha1.StorageFenceReport{NodeName: node, VolumeCount: 1, ListTime: &listed,
			Fences: []fencingv1alpha1.ReportedFence{{VolumeIDs: []string{"vol-1"}, FencedAt: &fencedAt}}},
	}
}

func fakeClients(kube, fenceObjs []runtime.Object) (Clients, *kubefake.Clientset, *fencingfake.Clientset) {
	k := kubefake.NewClientset(kube...)
	f := fencingfake.NewSimpleClientset(fenceObjs...)
	return Clients{Kube: k, Fencing: f}, k, f
}

// notFound answers like an API server that does not serve the resource.
func notFound(action k8stesting.Action) (bool, runtime.Object, error) {
	return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: action.GetResource().Group, Resource: action.GetResource().Resource}, "")
}

// forbidden answers like an API server whose RBAC denies the action.
func forbidden(action k8stesting.Action) (bool, runtime.Object, error) {
	return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: action.GetResource().Group, Resource: action.GetResource().Resource}, "", errors.New("RBAC: access denied"))
}
