package kubectlplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/cutoff"
	fencingclient "fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/names"
)

const driver = "block.csi.example.com"

// scene writes the objects the plugin is run against, with times relative
// to start:
//
//   - node "dead": fenced by FencingRequest dead-req (phase Fenced), out of
//     service, its pod web-0 terminating, its VolumeAttachment va-dead
//     being detached with a fence record;
//   - node "quarantined": NotReady, quarantined, its pod q-0 terminating;
//   - node "live": Ready, with the VolumeAttachment va-live;
//   - node "kept": Ready, labelled out of fencing;
//   - node "orphan": back, still carrying the taints and conditions of a
//     Failed FencingRequest that was deleted;
//   - node "back": back with a new boot ID after FencingRequest back-req,
//     Recovering under FencePolicy manual, which unfences by hand;
//   - the safe-detach driver, served by a fence-capable attacher, and one
//     Event of fenceline-controller.
type scene struct {
	t      *testing.T
	ctx    context.Context
	kube   kubernetes.Interface
	fences fencingclient.Interface
	start  time.Time
}

func (s *scene) at(d time.Duration) metav1.Time {
	return metav1.NewTime(s.start.Add(d).Truncate(time.Second))
}

func (s *scene) must(err error, what string) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func (s *scene) write() {
	s.writeFencing()
	req, err := s.fences.FencingV1alpha1().FencingRequests().Get(s.ctx, "dead-req", metav1.GetOptions{})
	s.must(err, "reading dead-req")
	s.node(testobj.Node("dead", testobj.UnknownSince(s.at(-5*time.Minute).Time),
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, s.at(-4*time.Minute).Time),
		testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, s.at(-270*time.Second).Time),
		testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, s.at(-4*time.Minute).Time),
		testobj.Annotation(names.OutOfServiceOwnerAnnotation, string(req.UID))))
	s.node(testobj.Node("quarantined", testobj.NotReadySince(s.at(-2*time.Minute).Time),
		testobj.TaintAt(names.QuarantineTaint, v1.TaintEffectNoSchedule, s.at(-80*time.Second).Time)))
	s.node(testobj.Node("live", testobj.ReadySince(s.at(-time.Hour).Time)))
	s.node(testobj.Node("kept", testobj.ReadySince(s.at(-time.Hour).Time), testobj.Label(detect.ExcludeLabel, "")))
	s.node(testobj.Node("orphan", testobj.ReadySince(s.at(-time.Minute).Time),
		testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, s.at(-20*time.Minute).Time),
		testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, s.at(-20*time.Minute).Time),
		testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, s.at(-20*time.Minute).Time),
		testobj.ConditionSince(names.FencingRequiredCondition, v1.ConditionTrue, s.at(-20*time.Minute).Time)))
	back, err := s.fences.FencingV1alpha1().FencingRequests().Get(s.ctx, "back-req", metav1.GetOptions{})
	s.must(err, "reading back-req")
	s.node(testobj.Node("back", testobj.ReadySince(s.at(-time.Minute).Time), testobj.BootID("boot-2"), testobj.Label("fencing", "manual"),
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, s.at(-10*time.Minute).Time),
		testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, s.at(-11*time.Minute).Time),
		testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, s.at(-11*time.Minute).Time),
		testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, s.at(-11*time.Minute).Time),
		testobj.ConditionSince(names.FencingRequiredCondition, v1.ConditionTrue, s.at(-11*time.Minute).Time),
		testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, s.at(-10*time.Minute).Time),
		testobj.Annotation(names.OutOfServiceOwnerAnnotation, string(back.UID))))

	for _, d := range []*storagev1.CSIDriver{
		testobj.CSIDriver(driver, map[string]string{names.SafeDetachAnnotation: "true"}),
		testobj.CSIDriver("nfs.example.com", nil),
	} {
		_, err := s.kube.StorageV1().CSIDrivers().Create(s.ctx, d, metav1.CreateOptions{})
		s.must(err, "creating CSIDriver "+d.Name)
	}
	hb := testobj.Heartbeat(metav1.NamespaceSystem, driver, s.start)
	hb.Annotations[names.HeartbeatVersionAnnotation] = "v0.1.0"
	_, err = s.kube.CoordinationV1().Leases(hb.Namespace).Create(s.ctx, hb, metav1.CreateOptions{})
	s.must(err, "creating the heartbeat")
	s.nodeLease("dead", s.at(-5*time.Minute).Time)
	s.nodeLease("quarantined", s.at(-2*time.Minute).Time)
	s.nodeLease("live", s.start)
	s.nodeLease("kept", s.start)
	s.nodeLease("orphan", s.start)
	s.nodeLease("back", s.start)

	s.volume("db", "web-0", "dead", "pv-dead")
	s.volume("db", "q-0", "quarantined", "pv-q")
	s.attachment("va-dead", "pv-dead", "dead", true)
	s.attachment("va-live", "pv-live", "live", false)
	s.event()
}

// writeFencing writes the policy, class and dead-req, Fenced.
func (s *scene) writeFencing() {
	api := s.fences.FencingV1alpha1()
	_, err := api.FenceClasses().Create(s.ctx, &fencingv1alpha1.FenceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bmc"},
		Spec: fencingv1alpha1.FenceClassSpec{Method: fencingv1alpha1.FenceMethodRedfish,
			CredentialsSecretRef: &fencingv1alpha1.SecretReference{Name: "bmc", Namespace: "fenceline-system"}},
	}, metav1.CreateOptions{})
	s.must(err, "creating FenceClass bmc")
	_, err = api.FencePolicies().Create(s.ctx, &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "workers"},
		Spec:       fencingv1alpha1.FencePolicySpec{Levels: []fencingv1alpha1.FenceLevel{{Index: 1, FenceClassNames: []string{"bmc"}}}},
	}, metav1.CreateOptions{})
	s.must(err, "creating FencePolicy workers")
	_, err = api.FencePolicies().Create(s.ctx, &fencingv1alpha1.FencePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Spec: fencingv1alpha1.FencePolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fencing": "manual"}},
			Levels: []fencingv1alpha1.FenceLevel{{Index: 1, FenceClassNames: []string{"bmc"}}}, Recovery: fencingv1alpha1.FenceRecovery{Unfence: "Manual"}},
	}, metav1.CreateOptions{})
	s.must(err, "creating FencePolicy manual")
	// In the order status lists them (by creation, then name): created in
	// two seconds or in one, back-req comes first either way.
	s.request("back-req", "back", "manual", fencingv1alpha1.FencingPhaseRecovering, -10*time.Minute)
	s.request("dead-req", "dead", "workers", fencingv1alpha1.FencingPhaseFenced, -4*time.Minute)
}

// request creates the controller's request for the node, in the phase,
// fenced (boot ID boot-1) at the offset from start.
func (s *scene) request(name, node, policy string, phase fencingv1alpha1.FencingPhase, fenced time.Duration) {
	api := s.fences.FencingV1alpha1()
	req, err := api.FencingRequests().Create(s.ctx, &fencingv1alpha1.FencingRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.FencingRequestNodeLabel: node}},
		Spec: fencingv1alpha1.FencingRequestSpec{NodeName: node, PolicyName: policy, Reason: "LeaseExpired",
			Requester: "controller", Action: fencingv1alpha1.FenceActionOff},
	}, metav1.CreateOptions{})
	s.must(err, "creating FencingRequest "+name)
	req.Status = fencingv1alpha1.FencingRequestStatus{Phase: phase, BootIDAtFence: "boot-1",
		Conditions: []metav1.Condition{{Type: "Complete", Status: metav1.ConditionTrue, Reason: "Level1Verified",
			Message: "every fence class of level 1 read the power back Off", LastTransitionTime: s.at(fenced)}}}
	_, err = api.FencingRequests().UpdateStatus(s.ctx, req, metav1.UpdateOptions{})
	s.must(err, "writing the status of "+name)
}

// node creates the node and writes its status (conditions, boot ID).
func (s *scene) node(n *v1.Node) {
	status := n.Status
	created, err := s.kube.CoreV1().Nodes().Create(s.ctx, n, metav1.CreateOptions{})
	s.must(err, "creating node "+n.Name)
	created.Status = status
	_, err = s.kube.CoreV1().Nodes().UpdateStatus(s.ctx, created, metav1.UpdateOptions{})
	s.must(err, "writing the status of node "+n.Name)
}

func (s *scene) nodeLease(node string, renew time.Time) {
	l := testobj.Lease(node, renew, testobj.LeaseDuration(40*time.Second))
	_, err := s.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(s.ctx, l, metav1.CreateOptions{})
	s.must(err, "creating the Lease of node "+node)
}

// volume creates a bound claim and its PV, and a pod of the node using it,
// then deletes the pod: a finalizer keeps it terminating.
func (s *scene) volume(ns, pod, node, pv string) {
	_, err := s.kube.CoreV1().PersistentVolumes().Create(s.ctx, testobj.CSIPV(pv, driver, "vol-"+pv, v1.ReadWriteOnce), metav1.CreateOptions{})
	s.must(err, "creating PV "+pv)
	if _, err := s.kube.CoreV1().Namespaces().Get(s.ctx, ns, metav1.GetOptions{}); err != nil {
		_, err = s.kube.CoreV1().Namespaces().Create(s.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		s.must(err, "creating namespace "+ns)
	}
	_, err = s.kube.CoreV1().PersistentVolumeClaims(ns).Create(s.ctx, testobj.PVC(ns, "data-"+pod, pv), metav1.CreateOptions{})
	s.must(err, "creating the claim of "+pod)
	p := testobj.Pod(ns, pod, testobj.OnNode(node), testobj.Claim("data", "data-"+pod))
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = nil, nil
	p.Finalizers = []string{"example.com/hold"}
	p.Spec.Containers = []v1.Container{{Name: "db", Image: "db"}}
	_, err = s.kube.CoreV1().Pods(ns).Create(s.ctx, p, metav1.CreateOptions{})
	s.must(err, "creating pod "+pod)
	s.must(s.kube.CoreV1().Pods(ns).Delete(s.ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(30))}), "deleting pod "+pod)
}

// attachment creates an attached VolumeAttachment; detaching adds the
// attacher's fence record and deletes it (its finalizer keeps it).
func (s *scene) attachment(name, pv, node string, detaching bool) {
	va := testobj.VA(name, driver, pv, node)
	va.Finalizers = []string{names.AttacherFinalizer(driver)}
	if detaching {
		va.Annotations = map[string]string{names.FenceRecordAnnotation: fencing.NewRecord(cutoff.ReasonOutOfService, "csi-"+node, s.at(-230*time.Second).Time).Encode()}
	}
	created, err := s.kube.StorageV1().VolumeAttachments().Create(s.ctx, va, metav1.CreateOptions{})
	s.must(err, "creating VolumeAttachment "+name)
	created.Status.Attached = true
	_, err = s.kube.StorageV1().VolumeAttachments().UpdateStatus(s.ctx, created, metav1.UpdateOptions{})
	s.must(err, "marking "+name+" attached")
	if detaching {
		s.must(s.kube.StorageV1().VolumeAttachments().Delete(s.ctx, name, metav1.DeleteOptions{}), "deleting "+name)
	}
}

func (s *scene) event() {
	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "dead.fenced"},
		InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "dead", UID: types.UID("uid-dead")},
		Reason:         "NodeFenced", Message: "FencingRequest dead-req: every fence class of level 1 read the power back Off",
		Type: v1.EventTypeNormal, Source: v1.EventSource{Component: "fenceline-controller"},
		FirstTimestamp: s.at(-4 * time.Minute), LastTimestamp: s.at(-4 * time.Minute), Count: 1,
	}
	_, err := s.kube.CoreV1().Events(ev.Namespace).Create(s.ctx, ev, metav1.CreateOptions{})
	s.must(err, "creating an Event")
}

// fenceReads are the rules to read what fence and unfence read (nodes,
// VolumeAttachments, node Leases, the fencing kinds).
var fenceReads = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"list"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
	{APIGroups: []string{names.APIGroup}, Resources: []string{"fencingrequests", "fencepolicies", "fenceclasses"}, Verbs: []string{"list"}},
}

// grantFenceReads lets the ServiceAccount read what fence reads, and
// nothing more.
func (s *scene) grantFenceReads(namespace, name string) {
	s.grant("fence-reader", namespace, name, fenceReads)
}

// grantFenceAsks gives the ServiceAccount the rights docs/kubectl-plugin.md
// lists for fence and unfence of a node with a request: the reads, create
// and patch on FencingRequests; no write on Nodes.
func (s *scene) grantFenceAsks(namespace, name string) {
	s.grant("fence-operator", namespace, name, append(slices.Clone(fenceReads),
		rbacv1.PolicyRule{APIGroups: []string{names.APIGroup}, Resources: []string{"fencingrequests"}, Verbs: []string{"create", "patch"}}))
}

func (s *scene) grant(role, namespace, name string, rules []rbacv1.PolicyRule) {
	_, err := s.kube.RbacV1().ClusterRoles().Create(s.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{})
	s.must(err, "creating ClusterRole "+role)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	_, err = s.kube.RbacV1().ClusterRoleBindings().Create(s.ctx, binding, metav1.CreateOptions{})
	s.must(err, "creating ClusterRoleBinding "+role)
}
