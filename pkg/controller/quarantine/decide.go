// Package quarantine recovers pods of safe-detach CSI drivers from a
// NotReady node without a human: after --quarantine-delay it taints the node
// fenceline.io/quarantine:NoSchedule, force-deletes the node's terminating
// pods whose volumes all come from drivers annotated fenceline.io/safe-detach,
// and releases their volumes from node.status.volumesInUse so that the
// attach/detach controller detaches at once. The detach is safe because the
// attacher fences the volume (ControllerUnpublishVolume with fence=true) for
// a quarantined node, so quarantine acts only while it sees the heartbeat of
// a fence-capable fenceline-attacher serving the driver (Attachers). The taint is lifted once the node is Ready again and
// no VolumeAttachment of a released volume is left for it.
package quarantine

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Action is what to do with a pod.
type Action int

const (
	// Skip: leave the pod alone (Why says why).
	Skip Action = iota
	// Wait: the node has not been NotReady long enough; look again after
	// PodDecision.After.
	Wait
	// Refuse: the pod qualifies by node and state but not by volumes; it
	// is left alone and the user is told why with an Event.
	Refuse
	// TaintFirst: the pod qualifies, but the node must carry the
	// quarantine taint before anything is deleted.
	TaintFirst
	// Delete: force-delete the pod.
	Delete
)

// PodDecision is the outcome of DecidePod.
type PodDecision struct {
	Action Action
	Why    string
	After  time.Duration
}

// Attachers is the attacher evidence a decision uses: per CSI driver, the
// verdict of cutoff.AttacherServes (whether a fence-capable
// fenceline-attacher currently serves it, and if not what is missing).
// A driver absent from the map has no evidence: quarantine acts only on
// positive evidence, so a caller that forgot to look a driver up gets a
// refusal, never a deletion or a release.
type Attachers map[string]cutoff.Evidence

// Missing returns what is missing for driver to count as served, or "".
func (a Attachers) Missing(driver string) string {
	ev, ok := a[driver]
	switch {
	case ok && ev.Serving:
		return ""
	case ok && ev.Missing != "":
		return ev.Missing
	}
	return fmt.Sprintf("no evidence looked up that a fence-capable fenceline-attacher serves driver %s", driver)
}

// DecidePod is the single place that states when quarantine force-deletes a
// pod: the node exists and its Ready condition has not been True for at least
// delay; the pod is terminating and not yet force-deleted; it has at least
// one volume from a safe-detach CSI driver and every other volume is either
// harmless (emptyDir, configMap, secret, downwardAPI, projected) or from a
// safe-detach driver, and none is ReadWriteMany; attachers shows, for every
// safe-detach driver of the pod, positive and fresh evidence that a
// fence-capable fenceline-attacher serves it (the deletion is safe only
// because that attacher fences the detach that follows); and the node
// already carries the quarantine taint. Without the evidence the pod is
// refused, not tainted for: the taint would only lead to a deletion that is
// not allowed.
func DecidePod(node *v1.Node, pod *v1.Pod, vols []podvolumes.Volume, attachers Attachers, now time.Time, delay time.Duration) PodDecision {
	switch {
	case pod == nil:
		return PodDecision{Why: "pod is gone"}
	case node == nil:
		return PodDecision{Why: "node does not exist"}
	case pod.Spec.NodeName != node.Name:
		return PodDecision{Why: "pod is not bound to this node"}
	}
	down, notReady := nodeutil.NotReadyFor(node, now)
	switch {
	case !notReady:
		return PodDecision{Why: "node is Ready"}
	case !podutil.IsTerminating(pod):
		return PodDecision{Why: "pod is not terminating"}
	case podutil.IsForceDeleted(pod):
		return PodDecision{Why: "pod was already force-deleted and waits for its finalizers"}
	case down < delay:
		return PodDecision{Action: Wait, Why: fmt.Sprintf("node not Ready for %s, quarantine after %s", down.Round(time.Second), delay), After: delay - down}
	}
	if why := refusal(vols, attachers); why != "" {
		return PodDecision{Action: Refuse, Why: why}
	}
	if !cutoff.IsQuarantined(node) {
		return PodDecision{Action: TaintFirst, Why: "node must be quarantined before pods are deleted"}
	}
	return PodDecision{Action: Delete, Why: fmt.Sprintf("fenceline: node %s not Ready for %s and every volume is from a safe-detach driver that fences on detach", node.Name, down.Round(time.Second))}
}

// refusal returns why the pod's volumes, or the evidence about their
// attachers, rule out a safe detach, or "".
func refusal(vols []podvolumes.Volume, attachers Attachers) string {
	safe := 0
	var reasons, unserved []string
	for _, v := range vols {
		switch v.Kind {
		case podvolumes.KindHarmless:
		case podvolumes.KindCSI:
			switch {
			case !v.SafeDetach:
				reasons = append(reasons, fmt.Sprintf("volume %q: CSI driver %s is not annotated %s=true", v.Name, v.Driver, names.SafeDetachAnnotation))
			case v.RWX:
				reasons = append(reasons, fmt.Sprintf("volume %q is ReadWriteMany", v.Name))
			case attachers.Missing(v.Driver) != "":
				if !slices.Contains(unserved, v.Driver) { // once per driver
					unserved = append(unserved, v.Driver)
					reasons = append(reasons, attachers.Missing(v.Driver))
				}
			default:
				safe++
			}
		case podvolumes.KindInlineCSI:
			reasons = append(reasons, fmt.Sprintf("volume %q is an inline CSI volume of %s, which is not fenced", v.Name, v.Driver))
		case podvolumes.KindNodeLocal:
			reasons = append(reasons, fmt.Sprintf("volume %q is node-local storage (%s)", v.Name, v.Detail))
		case podvolumes.KindUnresolved:
			reasons = append(reasons, fmt.Sprintf("volume %q cannot be resolved: %s", v.Name, v.Detail))
		default:
			reasons = append(reasons, fmt.Sprintf("volume %q: %s", v.Name, v.Detail))
		}
	}
	if len(reasons) > 0 {
		return "not safe to force-delete: " + strings.Join(reasons, "; ")
	}
	if safe == 0 {
		return "not safe to force-delete: the pod has no volume from a safe-detach CSI driver"
	}
	return ""
}

// NodeDecision is the outcome of DecideUntaint.
type NodeDecision struct {
	Untaint bool
	Why     string
	// After is set when the decision may change by itself after that long.
	After time.Duration
}

// DecideUntaint is the single place that states when the quarantine taint is
// lifted: the node carries it (key and effect NoSchedule) and has been Ready
// for at least liftDelay (so that its kubelet has reported the volumes it
// still has mounted), releasedVAs is 0: no VolumeAttachment of a volume
// quarantine released remains for it (every fenced volume went through a
// full detach; see ReleasedVAs, which leaves out the volumes of pods that
// stayed), and staleVolumes is 0: the kubelet no longer lists a volume of a
// safe-detach driver that no pod on the node uses, i.e. its node-side
// clean-up (NodeUnpublish/NodeUnstage), which lifts the fence, is done.
func DecideUntaint(node *v1.Node, releasedVAs, staleVolumes int, now time.Time, liftDelay time.Duration) NodeDecision {
	switch {
	case node == nil:
		return NodeDecision{Why: "node does not exist"}
	case !cutoff.IsQuarantined(node):
		return NodeDecision{Why: "node is not quarantined"}
	case !nodeutil.IsReady(node):
		return NodeDecision{Why: "node is not Ready"}
	}
	if c := nodeutil.ReadyCondition(node); c != nil {
		if up := now.Sub(c.LastTransitionTime.Time); up < liftDelay {
			return NodeDecision{Why: fmt.Sprintf("node Ready for %s, waiting %s for its kubelet to report mounted volumes", up.Round(time.Second), liftDelay), After: liftDelay - up}
		}
	}
	switch {
	case releasedVAs > 0:
		return NodeDecision{Why: fmt.Sprintf("%d VolumeAttachment(s) of released safe-detach volumes remain", releasedVAs)}
	case staleVolumes > 0:
		return NodeDecision{Why: fmt.Sprintf("the kubelet still lists %d fenced volume(s) in use; waiting for its node-side clean-up", staleVolumes)}
	}
	return NodeDecision{Untaint: true, Why: "node is Ready again, cleaned up its fenced volumes, and no VolumeAttachment of a released volume remains"}
}

// ReleasedVAs counts the node's VolumeAttachments that the quarantine lift
// must wait for: those of safe-detach drivers whose PV no live pod on the
// node uses (livePVs), i.e. the volumes quarantine released and the attacher
// fences on detach. A pod that stayed keeps its volume attached, and its
// VolumeAttachment must not hold the quarantine forever. A VolumeAttachment
// without a PV name cannot be matched to a pod and is counted.
func ReleasedVAs(vas []*storagev1.VolumeAttachment, isSafeDriver func(string) bool, livePVs map[string]bool) int {
	n := 0
	for _, va := range vas {
		if !isSafeDriver(va.Spec.Attacher) {
			continue
		}
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && livePVs[*pv] {
			continue
		}
		n++
	}
	return n
}

// Release is the outcome of VolumesToRelease.
type Release struct {
	// Volumes are the entries to remove from status.volumesInUse.
	Volumes []v1.UniqueVolumeName
	// Withheld says why unused volumes of safe-detach drivers stay listed
	// (missing attacher evidence, ReadWriteMany), or "".
	Withheld string
	// Why says why nothing (or what) is released.
	Why string
}

// VolumesToRelease is the single place that states which volumes are removed
// from a node's status.volumesInUse: only on a quarantined node whose Ready
// condition has not been True for at least delay (the same delay as for
// deleting pods, so that a quarantine taint left from an earlier episode
// never lets a short NotReady blip release anything), only volumes of
// safe-detach drivers for which attachers shows a fence-capable
// fenceline-attacher serving them (the release is safe only because that
// attacher fences the detach; a driver absent from attachers is withheld),
// never a volume for which keep gives a reason (a ReadWriteMany volume:
// other nodes use it and a per-node fence is not what the driver promised
// for it), and only those no live pod on the node still uses (inUse), so
// the attach/detach controller never detaches a volume from under a pod it
// still wants there.
func VolumesToRelease(node *v1.Node, isSafeDriver func(string) bool, attachers Attachers, keep func(v1.UniqueVolumeName) string, inUse map[v1.UniqueVolumeName]bool, now time.Time, delay time.Duration) Release {
	if node == nil {
		return Release{Why: "node does not exist"}
	}
	down, notReady := nodeutil.NotReadyFor(node, now)
	switch {
	case !notReady:
		return Release{Why: "node is Ready: its kubelet owns volumesInUse"}
	case !cutoff.IsQuarantined(node):
		return Release{Why: "node is not quarantined"}
	case down < delay:
		return Release{Why: fmt.Sprintf("node not Ready for only %s, less than the quarantine delay %s", down.Round(time.Second), delay)}
	}
	var r Release
	var withheld []string
	for _, v := range UnusedSafeVolumes(node, isSafeDriver, inUse) {
		driver, _ := nodeutil.CSIVolumeDriver(v)
		m := keep(v)
		if m == "" {
			m = attachers.Missing(driver)
		}
		if m != "" {
			if !slices.Contains(withheld, m) {
				withheld = append(withheld, m)
			}
			continue
		}
		r.Volumes = append(r.Volumes, v)
	}
	r.Withheld = strings.Join(withheld, "; ")
	switch {
	case len(r.Volumes) > 0:
		r.Why = "no pod on the quarantined node uses them; the attacher fences them on detach"
	case r.Withheld != "":
		r.Why = "unused volumes of safe-detach drivers are kept: " + r.Withheld
	default:
		r.Why = "no unused volume of a safe-detach driver is listed"
	}
	return r
}

// UnusedSafeVolumes returns the entries of node.status.volumesInUse that
// belong to safe-detach drivers and that no live pod on the node uses.
func UnusedSafeVolumes(node *v1.Node, isSafeDriver func(string) bool, inUse map[v1.UniqueVolumeName]bool) []v1.UniqueVolumeName {
	if node == nil {
		return nil
	}
	var out []v1.UniqueVolumeName
	for _, name := range node.Status.VolumesInUse {
		driver, ok := nodeutil.CSIVolumeDriver(name)
		if !ok || !isSafeDriver(driver) || inUse[name] {
			continue
		}
		out = append(out, name)
	}
	return out
}
