package storagefence

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	"fenceline.io/fenceline/pkg/kube/apitext"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// ObjectName is the name of the StorageFence of driver's fences against
// nodeID: a digest of both, since node IDs need not be valid object names.
func ObjectName(driver, nodeID string) string {
	sum := sha256.Sum256([]byte(driver + "\x00" + nodeID))
	return "sf-" + hex.EncodeToString(sum[:10])
}

// Report turns the fences the storage reported against one node into a
// StorageFence status, bounded to fit one object. nodeName is the node
// whose CSINode names the node ID, "" when none does.
func Report(nodeName string, fences []*fencev1.Fence) fencingv1alpha1.StorageFenceReport {
	r := fencingv1alpha1.StorageFenceReport{NodeName: nodeName}
	volumes := map[string]bool{}
	for i, f := range fences {
		r.AllVolumes = r.AllVolumes || f.GetAllVolumes()
		for _, v := range f.GetVolumeIds() {
			volumes[v] = true
		}
		if i >= fencingv1alpha1.MaxReportedFences {
			r.Truncated++
			continue
		}
		rf := fencingv1alpha1.ReportedFence{AllVolumes: f.GetAllVolumes(), Details: apitext.Truncate(f.GetDetails(), 1024)}
		ids := f.GetVolumeIds()
		if len(ids) > fencingv1alpha1.MaxReportedVolumes {
			rf.MoreVolumes = int32(len(ids) - fencingv1alpha1.MaxReportedVolumes)
			ids = ids[:fencingv1alpha1.MaxReportedVolumes]
		}
		rf.VolumeIDs = slices.Clone(ids)
		if t := f.GetFencedAt(); t != nil {
			at := metav1.NewTime(t.AsTime())
			rf.FencedAt = &at
		}
		r.Fences = append(r.Fences, rf)
	}
	r.VolumeCount = int32(len(volumes))
	return r
}

// LiftInput is what DecideLift looks at for one lift request, read fresh
// at the moment of the lift.
type LiftInput struct {
	// Request is the StorageFence's spec.lift; nil when none.
	Request *fencingv1alpha1.FenceLiftRequest
	// CanLift is true when the driver advertises LIFT_FENCE.
	CanLift bool
	// Driver is the CSI driver's name.
	Driver string
	// NodeName is the node whose CSINode gives the driver the node ID; ""
	// when none does.
	NodeName string
	// Node is that Node; nil when NodeName is "" or no such Node exists.
	Node *v1.Node
	// Fences are the node's fences as the storage reports them now.
	Fences []*fencev1.Fence
	// Detaching names the VolumeAttachments of the driver to the node
	// that are being deleted: detaches not done yet.
	Detaching []string
}

// Reasons of LiftDecision, the Lifted condition's reason while a request
// waits or once it is done.
const (
	ReasonNotRequested    = "NotRequested"
	ReasonLiftUnsupported = "LiftUnsupported"
	ReasonNoFences        = "NoFences"
	ReasonNodeUnknown     = "NodeUnknown"
	ReasonNodeNotReady    = "NodeNotReady"
	ReasonNodeCutOff      = "NodeCutOff"
	ReasonDetachPending   = "DetachPending"
	ReasonVolumesInUse    = "VolumesInUse"
	// ReasonNodeSafe and ReasonConfirmedGone are the evidence a lift is
	// carried out on.
	ReasonNodeSafe      = "NodeSafe"
	ReasonConfirmedGone = "ConfirmedGone"
)

// LiftDecision says whether to lift a node's fences now, and why.
type LiftDecision struct {
	Lift    bool
	Reason  string
	Message string
}

// DecideLift decides a lift request. A lift lets a node that still holds
// a fenced volume write to it again (the storage stops refusing its I/O),
// so a lift needs evidence that the node holds none of the fenced volumes:
//
//   - its Node is Ready (kube-controller-manager saw its heartbeats), with
//     nothing cutting it off (out-of-service, quarantine, force-eviction,
//     fencing taints, FencingComplete): whoever cut it off has not let it
//     go yet;
//   - no detach of the driver from the node is pending: a fenced detach
//     would fence it again, a plain one means a volume still attached;
//   - its kubelet lists none of the fenced volumes (for a node-wide fence,
//     none of the driver's) in status.volumesInUse: it has unmounted them;
//   - or, for a node ID no Node names (a deleted Node proves nothing about
//     its machine), the requester confirmed the machine is gone.
//
// It is a pure function; the caller reads its inputs fresh.
func DecideLift(in LiftInput) LiftDecision {
	switch {
	case in.Request == nil:
		return LiftDecision{Reason: ReasonNotRequested, Message: "no lift requested"}
	case !in.CanLift:
		return LiftDecision{Reason: ReasonLiftUnsupported, Message: "driver " + in.Driver + " does not advertise LIFT_FENCE; only the storage's own tools can lift its fences"}
	case len(in.Fences) == 0:
		return LiftDecision{Reason: ReasonNoFences, Message: "the storage reports no fence against the node"}
	case len(in.Detaching) > 0:
		return LiftDecision{Reason: ReasonDetachPending, Message: "detaches from the node are pending: " + strings.Join(in.Detaching, ", ")}
	case in.Node == nil:
		return decideGone(in)
	case !nodeutil.IsReady(in.Node):
		return LiftDecision{Reason: ReasonNodeNotReady, Message: "node " + in.Node.Name + " is not Ready: nothing shows it stopped using the fenced volumes"}
	}
	if why := cutOffBy(in.Node); why != "" {
		return LiftDecision{Reason: ReasonNodeCutOff, Message: "node " + in.Node.Name + " is still cut off (" + why + "); whoever cut it off lets it go first"}
	}
	if used := inUse(in); len(used) > 0 {
		return LiftDecision{Reason: ReasonVolumesInUse, Message: fmt.Sprintf("node %s still lists fenced volumes in status.volumesInUse: %s", in.Node.Name, strings.Join(used, ", "))}
	}
	return LiftDecision{Lift: true, Reason: ReasonNodeSafe, Message: "node " + in.Node.Name + " is Ready, nothing cuts it off and it uses none of the fenced volumes"}
}

func decideGone(in LiftInput) LiftDecision {
	who := "no CSINode names the node ID"
	if in.NodeName != "" {
		who = "node " + in.NodeName + " does not exist"
	}
	if !in.Request.ConfirmedGone {
		return LiftDecision{Reason: ReasonNodeUnknown, Message: who + ", and a missing Node proves nothing about its machine; confirm the machine is gone (kubectl fenceline lift-fence --confirm-gone) to lift"}
	}
	return LiftDecision{Lift: true, Reason: ReasonConfirmedGone, Message: "no Node names the node and " + in.Request.RequestedBy + " confirmed its machine is gone"}
}

// cutOffBy names what still cuts node off, "" if nothing does.
func cutOffBy(node *v1.Node) string {
	var by []string
	for _, key := range []string{names.OutOfServiceTaint, names.QuarantineTaint, names.ForceEvictionTaint, names.FencingRequiredTaint, names.FencingTriagedTaint} {
		if nodeutil.HasTaint(node, key) {
			by = append(by, "taint "+key)
		}
	}
	if cutoff.FencingComplete(node) {
		by = append(by, "condition "+names.FencingCompleteCondition)
	}
	return strings.Join(by, ", ")
}

// inUse returns the fenced volumes the node lists in volumesInUse (every
// volume of the driver when a fence is node-wide).
func inUse(in LiftInput) []string {
	fenced := map[v1.UniqueVolumeName]bool{}
	all := false
	for _, f := range in.Fences {
		all = all || f.GetAllVolumes()
		for _, id := range f.GetVolumeIds() {
			fenced[nodeutil.CSIUniqueVolumeName(in.Driver, id)] = true
		}
	}
	prefix := string(nodeutil.CSIUniqueVolumeName(in.Driver, ""))
	var out []string
	for _, v := range in.Node.Status.VolumesInUse {
		if fenced[v] || (all && strings.HasPrefix(string(v), prefix)) {
			out = append(out, string(v))
		}
	}
	return out
}
