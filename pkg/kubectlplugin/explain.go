package kubectlplugin

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/controller/forceeviction"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/controller/outofservice"
	"fenceline.io/fenceline/pkg/controller/podgc"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/controller/quarantine"
	"fenceline.io/fenceline/pkg/controller/tainteviction"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// ExplainConfig holds the controller settings the decisions depend on; the
// defaults are the controller's flag defaults.
type ExplainConfig struct {
	// QuarantineDelay is fenceline-controller's --quarantine-delay.
	QuarantineDelay time.Duration
	// ForceEvictionReadyGrace is --force-eviction-ready-grace.
	ForceEvictionReadyGrace time.Duration
}

// DefaultExplainConfig returns the controller's defaults.
func DefaultExplainConfig() ExplainConfig {
	return ExplainConfig{QuarantineDelay: quarantine.DefaultDelay, ForceEvictionReadyGrace: forceeviction.DefaultReadyGrace}
}

// NodeObjects are the objects of one node that explain reads besides the
// snapshot: its kubelet Lease, its pods, and the claims and volumes the
// pods' volumes resolve through.
type NodeObjects struct {
	Lease *coordinationv1.Lease
	Pods  []*v1.Pod
	PVCs  []*v1.PersistentVolumeClaim
	PVs   []*v1.PersistentVolume
}

// ReadNodeObjects reads the node's Lease, pods, and the PVCs and PVs.
func ReadNodeObjects(ctx context.Context, c Clients, node string) (*NodeObjects, error) {
	o := &NodeObjects{}
	lease, err := nodeutil.ReadLease(ctx, c.Kube, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, permissionHint(err, "get", "leases.coordination.k8s.io in kube-node-lease")
	}
	o.Lease = lease
	pods, err := c.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, permissionHint(err, "list", "pods")
	}
	for _, p := range pointers(pods.Items) {
		if p.Spec.NodeName == node { // the selector, again for servers and fakes that ignore it
			o.Pods = append(o.Pods, p)
		}
	}
	pvcs, err := c.Kube.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, permissionHint(err, "list", "persistentvolumeclaims")
	}
	o.PVCs = pointers(pvcs.Items)
	pvs, err := c.Kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, permissionHint(err, "list", "persistentvolumes")
	}
	o.PVs = pointers(pvs.Items)
	return o, nil
}

// Explanation is what explain shows, and its -o json|yaml form.
type Explanation struct {
	Node     string    `json:"node"`
	Now      time.Time `json:"now"`
	Verdicts []Verdict `json:"verdicts"`
}

// Verdict is one controller's decision about the node or one of its objects.
type Verdict struct {
	// Controller is the controller (fenceline-controller's name for it) or
	// "attacher".
	Controller string `json:"controller"`
	// Object is what the decision is about: node/<name>, pod/<ns>/<name>,
	// volumeattachment/<name>.
	Object   string `json:"object"`
	Decision string `json:"decision"`
	Why      string `json:"why"`
}

// Explain runs, on the snapshot and the node's objects, the decision
// functions of every controller that acts on the node, its pods and its
// VolumeAttachments. The node must exist.
func Explain(s *Snapshot, objs *NodeObjects, nodeName string, cfg ExplainConfig) (Explanation, error) {
	node := s.Node(nodeName)
	if node == nil {
		return Explanation{}, fmt.Errorf("node %q not found", nodeName)
	}
	e := Explanation{Node: nodeName, Now: s.Now}
	e.Verdicts = append(e.Verdicts, nodeFencingVerdict(s, objs, node))
	e.Verdicts = append(e.Verdicts, outOfServiceVerdict(nodeView{s: s, objs: objs, node: nodeName}, node))
	resolver := newResolver(s, objs)
	attachers := attacherEvidence(s)
	for _, pod := range objs.Pods {
		e.Verdicts = append(e.Verdicts, podVerdicts(s, objs, node, pod, resolver, attachers, cfg)...)
	}
	pvs := make(map[string]*v1.PersistentVolume, len(objs.PVs))
	for _, pv := range objs.PVs {
		pvs[pv.Name] = pv
	}
	for _, va := range s.VAsOf(nodeName) {
		e.Verdicts = append(e.Verdicts, attacherVerdict(s, node, va, vaVolume(pvs, va)))
	}
	return e, nil
}

func nodeRef(n *v1.Node) string { return "node/" + n.Name }

// nodeFencingVerdict is nodefencing.Decide on the node's inputs, gathered
// as the controller gathers them.
func nodeFencingVerdict(s *Snapshot, objs *NodeObjects, node *v1.Node) Verdict {
	v := Verdict{Controller: "node-fencing", Object: nodeRef(node)}
	if !s.FencingAPI {
		v.Decision, v.Why = "none", "the fencing API (fenceline.io CRDs) is not installed: node-fencing does not run"
		return v
	}
	d := nodefencing.Decide(FencingInput(s, objs.Lease, node))
	v.Decision = joinNonEmpty(" ", string(d.Step), bracket(d.Reason))
	if d.Step == nodefencing.StepNone {
		v.Decision = joinNonEmpty(" ", "wait", bracket(d.Reason))
	}
	v.Why = d.Why
	return v
}

// FencingInput gathers nodefencing.Decide's input for node from the
// snapshot with the controller's own gather (nodefencing.Gather): the
// node's oldest open request, the policy it resolves to and that policy's
// cross-object problems. The plugin has no history of the Lease's
// renewals, so it judges the Lease by its renewTime as a snapshot
// (detect.Snapshot): the node's clock, where the controller counts from
// when it observed the renewal.
func FencingInput(s *Snapshot, lease *coordinationv1.Lease, node *v1.Node) nodefencing.Input {
	v := nodeView{s: s, objs: &NodeObjects{Lease: lease}, node: node.Name}
	observe := func(l *coordinationv1.Lease) (time.Time, bool) { return detect.Snapshot(l, s.Now).ObservedAt, false }
	// The snapshot's view never fails.
	in, _ := nodefencing.Gather(context.Background(), v, v, node.Name, s.Now, observe)
	return in
}

func bracket(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// outOfServiceVerdict is the opt-in out-of-service taint remover's decision,
// on the input gathered as the controller gathers it.
func outOfServiceVerdict(v nodeView, node *v1.Node) Verdict {
	in, err := outofservice.Gather(context.Background(), v, node.Name)
	if err != nil {
		return Verdict{Controller: "out-of-service (opt-in)", Object: nodeRef(node), Decision: "unknown", Why: err.Error()}
	}
	d := in.Decide()
	decision := "keep"
	switch {
	case d.Untaint:
		decision = "remove the out-of-service taint"
	case d.RecordBootID:
		decision = "record the boot ID"
	case d.ClearRecord:
		decision = "forget the recorded boot ID"
	}
	return Verdict{Controller: "out-of-service (opt-in)", Object: nodeRef(node), Decision: decision, Why: d.Why}
}

// podVerdicts are the decisions of the controllers that delete pods.
func podVerdicts(s *Snapshot, objs *NodeObjects, node *v1.Node, pod *v1.Pod, resolver *podvolumes.Resolver, attachers quarantine.Attachers, cfg ExplainConfig) []Verdict {
	ref := "pod/" + pod.Namespace + "/" + pod.Name
	gc := podgc.Decide(node, pod)
	out := []Verdict{{Controller: "podgc", Object: ref, Decision: deleteOrLeave(gc.Delete), Why: gc.Why}}
	vols, err := resolver.PodVolumes(pod)
	if err != nil {
		out = append(out, Verdict{Controller: "quarantine", Object: ref, Decision: "unknown", Why: err.Error()})
	} else {
		d := quarantine.DecidePod(node, pod, vols, attachers, s.Now, cfg.QuarantineDelay)
		out = append(out, Verdict{Controller: "quarantine", Object: ref, Decision: quarantineAction(d), Why: d.Why})
	}
	fe := forceeviction.DecidePod(node, pod, objs.Lease, s.Now, cfg.ForceEvictionReadyGrace)
	out = append(out, Verdict{Controller: "force-eviction", Object: ref, Decision: deleteOrLeave(fe.Delete), Why: fe.Why})
	if err == nil {
		out = append(out, taintEvictionVerdict(s, node, pod, vols, ref))
	}
	return out
}

// taintEvictionVerdict is the alpha taint-eviction's decision, with the
// pod's volumes classified as that controller classifies them. A taint
// without timeAdded counts from now: the controller counts from when it
// first saw it, which only it knows.
func taintEvictionVerdict(s *Snapshot, node *v1.Node, pod *v1.Pod, vols []podvolumes.Volume, ref string) Verdict {
	in := tainteviction.PodInput{Pod: pod, Node: node, Now: s.Now, Seen: func(v1.Taint) time.Time { return s.Now }}
	var safe bool
	in.Stateful, safe = tainteviction.Stateful(vols)
	in.CutOff = cutoff.NodeReason(node, safe)
	d := tainteviction.DecidePod(in)
	decision := "leave"
	switch d.Action {
	case tainteviction.ActionWait:
		decision = "evict in " + d.At.Sub(s.Now).Round(time.Second).String()
	case tainteviction.ActionEvict:
		decision = "evict"
	case tainteviction.ActionForceDelete:
		decision = "force-delete"
	case tainteviction.ActionHold:
		decision = "hold"
	}
	return Verdict{Controller: "taint-eviction (alpha)", Object: ref, Decision: decision, Why: d.Why}
}

func deleteOrLeave(del bool) string {
	if del {
		return "force-delete"
	}
	return "leave"
}

func quarantineAction(d quarantine.PodDecision) string {
	switch d.Action {
	case quarantine.Wait:
		return "wait " + d.After.Round(time.Second).String()
	case quarantine.Refuse:
		return "refuse"
	case quarantine.TaintFirst:
		return "quarantine the node"
	case quarantine.Delete:
		return "force-delete"
	}
	return "leave"
}

// attacherEvidence is cutoff.AttacherServes for every CSIDriver, the
// evidence quarantine decides by, on the heartbeats' renewTime as a
// snapshot (cutoff.Snapshot: the plugin has no history of renewals).
func attacherEvidence(s *Snapshot) quarantine.Attachers {
	a := quarantine.Attachers{}
	for _, d := range s.Drivers {
		a[d.Name] = cutoff.AttacherServes(d.Name, cutoff.Snapshot(s.Heartbeats, s.Now), d, s.Now)
	}
	return a
}

// attacherVerdict is fencing.Decide for a VolumeAttachment, as the driver's
// fenceline-attacher would take it on fresh data. The driver's fence
// capability comes from the attacher's heartbeat; without one both answers
// are given.
func attacherVerdict(s *Snapshot, node *v1.Node, va *storagev1.VolumeAttachment, volume v1.UniqueVolumeName) Verdict {
	v := Verdict{Controller: "attacher", Object: "volumeattachment/" + va.Name}
	rec, recErr := fencing.RecordOf(va)
	intent, intentErr := cutoff.IntentOf(va)
	in := fencing.Input{Record: rec, Intent: intent, Volume: volume, Node: node, Driver: s.Driver(va.Spec.Attacher), Fresh: true}
	verdict := func(canFence bool) (string, string) {
		in.DriverCanFence = canFence
		d := fencing.Decide(in)
		return detachWord(d), joinNonEmpty(": ", string(d.Reason), d.Why)
	}
	prefix := ""
	if va.DeletionTimestamp == nil {
		prefix = "if detached now: "
	}
	l := newestHeartbeat(s.Heartbeats, va.Spec.Attacher)
	if l == nil {
		yes, whyYes := verdict(true)
		no, whyNo := verdict(false)
		v.Decision = prefix + yes + " / " + no
		v.Why = fmt.Sprintf("no fenceline-attacher heartbeat for driver %s: if it advertises UNPUBLISH_FENCE, %s; if not, %s", va.Spec.Attacher, orPlain(whyYes), orPlain(whyNo))
	} else {
		d, why := verdict(l.Annotations[names.HeartbeatUnpublishFenceAnnotation] == "true")
		v.Decision, v.Why = prefix+d, orPlain(why)
	}
	for _, err := range []error{recErr, intentErr} {
		if err != nil {
			v.Why = joinNonEmpty("; ", v.Why, err.Error())
		}
	}
	return v
}

// vaVolume is the VolumeAttachment's volume as node status names it (to
// find it in volumesInUse), "" when its PersistentVolume is not a CSI one
// the plugin read.
func vaVolume(pvs map[string]*v1.PersistentVolume, va *storagev1.VolumeAttachment) v1.UniqueVolumeName {
	name := va.Spec.Source.PersistentVolumeName
	if name == nil {
		if in := va.Spec.Source.InlineVolumeSpec; in != nil && in.CSI != nil {
			return nodeutil.CSIUniqueVolumeName(in.CSI.Driver, in.CSI.VolumeHandle)
		}
		return ""
	}
	if pv := pvs[*name]; pv != nil && pv.Spec.CSI != nil {
		return nodeutil.CSIUniqueVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	}
	return ""
}

func detachWord(d fencing.Decision) string {
	switch d.Action {
	case fencing.ActionFenced:
		return "fenced detach"
	case fencing.ActionRefuse:
		return "refuse to detach"
	}
	return "plain detach"
}

func orPlain(why string) string {
	if why == "" {
		return "the node is not cut off"
	}
	return why
}

// newResolver classifies pod volumes from the snapshot as quarantine does
// from its informers: the same podvolumes.Resolver over listers.
func newResolver(s *Snapshot, objs *NodeObjects) *podvolumes.Resolver {
	pvcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	drivers := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs.PVCs {
		_ = pvcs.Add(o) // a keyed object always adds
	}
	for _, o := range objs.PVs {
		_ = pvs.Add(o)
	}
	for _, o := range s.Drivers {
		_ = drivers.Add(o)
	}
	return podvolumes.NewResolver(corelisters.NewPersistentVolumeClaimLister(pvcs), corelisters.NewPersistentVolumeLister(pvs), storagelisters.NewCSIDriverLister(drivers))
}
