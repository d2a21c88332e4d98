package kubectlplugin

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/controller/app"
	"fenceline.io/fenceline/pkg/controller/explain"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/kube/view"
	"fenceline.io/fenceline/pkg/names"
)

// ExplainConfig holds the controller settings the decisions depend on:
// each controller's own (its Descriptor's Settings), with the controller's
// flag defaults.
type ExplainConfig struct {
	Settings map[string]app.Settings
}

// DefaultExplainConfig returns the controllers' defaults.
func DefaultExplainConfig() ExplainConfig {
	return ExplainConfig{Settings: app.DefaultOptions().Settings}
}

// AddFlags defines the controllers' settings flags on fs, under
// fenceline-controller's names, for an operator whose controller does not
// run with the defaults.
func (c ExplainConfig) AddFlags(fs *flag.FlagSet) {
	app.Options{Settings: c.Settings}.AddControllerFlags(fs)
}

// NodeObjects are the objects of one node that explain reads besides the
// snapshot: its kubelet Lease, its pods, and the claims and volumes the
// pods' volumes resolve through.
type NodeObjects struct {
	Lease *coordinationv1.Lease
	// Target is the node's FenceTarget (its power-check answer), nil when
	// it has none or the reader may not get it.
	Target *fencingv1alpha1.FenceTarget
	Pods   []*v1.Pod
	PVCs   []*v1.PersistentVolumeClaim
	PVs    []*v1.PersistentVolume
}

// ReadNodeObjects reads the node's Lease, pods, and the PVCs and PVs.
func ReadNodeObjects(ctx context.Context, c Clients, node string) (*NodeObjects, error) {
	o := &NodeObjects{}
	lease, err := nodeutil.ReadLease(ctx, c.Kube, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, permissionHint(err, "get", "leases.coordination.k8s.io in kube-node-lease")
	}
	o.Lease = lease
	if c.Fencing != nil {
		// A reader without access to FenceTargets still gets the rest:
		// only the power check's answer is missing from the explanation.
		t, err := c.Fencing.FencingV1alpha1().FenceTargets().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			o.Target = t
		}
	}
	if o.Pods, err = (view.API{Client: c.Kube}).PodsOnNode(ctx, node); err != nil {
		return nil, permissionHint(err, "list", "pods")
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
type Verdict = explain.Verdict

// Explain runs, on the snapshot and the node's objects, the explain hook
// of every controller of fenceline-controller (app.Controllers), then the
// attacher's decision on each of the node's VolumeAttachments. The verdicts
// come by object (the node, then each pod, then each VolumeAttachment) and,
// for one object, in the table's order. The node must exist.
func Explain(s *Snapshot, objs *NodeObjects, nodeName string, cfg ExplainConfig) (Explanation, error) {
	node := s.Node(nodeName)
	if node == nil {
		return Explanation{}, fmt.Errorf("node %q not found", nodeName)
	}
	v := nodeView{s: s, objs: objs, node: nodeName}
	in := explain.Input{
		Ctx: context.Background(), View: v, Node: node, Pods: objs.Pods, Resolver: newResolver(s, objs),
		Heartbeats: s.Heartbeats, Drivers: s.Drivers, Now: s.Now,
	}
	if s.FencingAPI {
		in.Fencing = v
	}
	e := Explanation{Node: nodeName, Now: s.Now}
	for _, d := range app.Controllers {
		if d.Explain != nil {
			in.Settings = cfg.Settings[d.Name]
			e.Verdicts = append(e.Verdicts, d.Explain(in)...)
		}
	}
	rank := map[string]int{explain.NodeRef(node): 0}
	for i, p := range objs.Pods {
		rank[explain.PodRef(p)] = i + 1
	}
	slices.SortStableFunc(e.Verdicts, func(a, b Verdict) int { return cmp.Compare(rank[a.Object], rank[b.Object]) })
	pvs := make(map[string]*v1.PersistentVolume, len(objs.PVs))
	for _, pv := range objs.PVs {
		pvs[pv.Name] = pv
	}
	for _, va := range s.VAsOf(nodeName) {
		e.Verdicts = append(e.Verdicts, attacherVerdict(s, node, va, vaVolume(pvs, va)))
	}
	return e, nil
}

// FencingInput gathers nodefencing.Decide's input for node from the
// snapshot with the controller's own gather (nodefencing.Gather), judging
// the Lease by its renewTime (the plugin has no history of renewals).
func FencingInput(s *Snapshot, lease *coordinationv1.Lease, node *v1.Node) nodefencing.Input {
	v := nodeView{s: s, objs: &NodeObjects{Lease: lease}, node: node.Name}
	// The snapshot's view never fails; NetworkFences it could not read
	// are in the input as a problem, and the decision waits on them.
	in, _ := nodefencing.Gather(context.Background(), v, v, snapshotFences{s}, node.Name, s.Now, nodefencing.SnapshotObserver(s.Now))
	return in
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

func bracket(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}
