package kubectlplugin

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/attacher/fencing"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// Status is what `kubectl fenceline status` shows, and its -o json|yaml form.
type Status struct {
	Drivers []DriverStatus `json:"drivers"`
	Nodes   []NodeStatus   `json:"nodes"`
	// FencingAPI is false when the fencing CRDs are not installed.
	FencingAPI      bool            `json:"fencingAPI"`
	FencingRequests []RequestStatus `json:"fencingRequests"`
	// Coverage is each FencePolicy's fence coverage, as fence-coverage
	// last wrote it.
	Coverage []CoverageStatus `json:"coverage"`
	Detaches []DetachStatus   `json:"pendingDetaches"`
	// StorageFences are the fences the drivers' storage reports.
	StorageFences []StorageFenceStatus `json:"storageFences"`
	// StorageFencesNote says why the StorageFences are not shown.
	StorageFencesNote string        `json:"storageFencesNote,omitempty"`
	Events            []EventStatus `json:"events"`
}

// StorageFenceStatus is a StorageFence: what one driver's storage fences
// one node off from, and its lift request.
type StorageFenceStatus struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Node   string `json:"node,omitempty"`
	NodeID string `json:"nodeID"`
	// Fenced says from what: "every volume" or "N volume(s)".
	Fenced string       `json:"fenced"`
	Listed *metav1.Time `json:"listed,omitempty"`
	// Lift is the lift request and its outcome, "" when none.
	Lift string `json:"lift,omitempty"`
}

// DriverStatus is a CSIDriver and what Fenceline knows about it.
type DriverStatus struct {
	Name           string `json:"name"`
	AttachRequired bool   `json:"attachRequired"`
	// SafeDetach is the fenceline.io/safe-detach opt-in.
	SafeDetach bool `json:"safeDetach"`
	// UnpublishFence is what the attacher's heartbeat reports: "true",
	// "false", or "" without a heartbeat.
	UnpublishFence string `json:"unpublishFence,omitempty"`
	// AttacherVersion is the fenceline-attacher version of the heartbeat.
	AttacherVersion string `json:"attacherVersion,omitempty"`
	// Serving is cutoff.AttacherServes: a fence-capable fenceline-attacher
	// serves the driver now; Missing says what is missing when not.
	Serving bool   `json:"serving"`
	Missing string `json:"missing,omitempty"`
	// Heartbeat is the newest heartbeat Lease (namespace/name), Renewed
	// its renewTime.
	Heartbeat string       `json:"heartbeat,omitempty"`
	Renewed   *metav1.Time `json:"heartbeatRenewed,omitempty"`
	// VolumeAttachments counts the driver's VolumeAttachments.
	VolumeAttachments int `json:"volumeAttachments"`
}

// NodeStatus is a node that carries one of Fenceline's marks or the
// out-of-service taint.
type NodeStatus struct {
	Name  string `json:"name"`
	Ready string `json:"ready"`
	// CutOff is cutoff.NodeReason for a safe-detach driver: why the
	// attacher counts the node as cut off from storage ("" if it does not).
	CutOff string `json:"cutOff,omitempty"`
	// InternalIP is the node's first InternalIP address, to find the
	// machine; BootID tells whether it rebooted since its fence.
	InternalIP string `json:"internalIP,omitempty"`
	BootID     string `json:"bootID,omitempty"`
	Marks      []Mark `json:"marks"`
}

// Mark is a taint or condition that says the node is quarantined, fenced or
// out of service.
type Mark struct {
	// Kind is "taint", "condition" or "ask" (an unfence ask not carried
	// out yet).
	Kind string `json:"kind"`
	// Name is the taint (key:effect) or condition (type=status).
	Name string `json:"name"`
	// Since is the taint's timeAdded or the condition's lastTransitionTime.
	Since  *metav1.Time `json:"since,omitempty"`
	Detail string       `json:"detail,omitempty"`
}

// RequestStatus is a FencingRequest.
type RequestStatus struct {
	Name      string      `json:"name"`
	Node      string      `json:"node"`
	Phase     string      `json:"phase"`
	Reason    string      `json:"reason"`
	Requester string      `json:"requester,omitempty"`
	Created   metav1.Time `json:"created"`
	// UID is what a node's out-of-service owner annotation names;
	// Policy and Action are spec.policyName and spec.action.
	UID    types.UID `json:"uid,omitempty"`
	Policy string    `json:"policy,omitempty"`
	Action string    `json:"action,omitempty"`
	// Message is the message of the latest condition, or errorMessage.
	Message string `json:"message,omitempty"`
	// Ask is an operator's unfence ask that node-fencing has not carried
	// out yet (the request is not finished).
	Ask string `json:"ask,omitempty"`
}

// CoverageStatus is a FencePolicy's status.coverage: the nodes it selects,
// and those that could not be fenced now.
type CoverageStatus struct {
	Policy string `json:"policy"`
	// Paused is spec.paused: no automatic fence starts under the policy.
	Paused bool `json:"paused"`
	// Known is false until fence-coverage wrote the policy's coverage (it
	// is not running, or not yet).
	Known bool `json:"known"`
	// UpToDate is true when the coverage was computed for the policy's
	// current generation; false when fence-coverage has not caught up
	// with its last change, or wrote none.
	UpToDate  bool                            `json:"upToDate"`
	Selected  int32                           `json:"selectedNodes"`
	Uncovered int32                           `json:"uncoveredNodes"`
	Nodes     []fencingv1alpha1.UncoveredNode `json:"uncovered,omitempty"`
}

// DetachStatus is a VolumeAttachment waiting to be detached.
type DetachStatus struct {
	Name   string `json:"name"`
	Driver string `json:"driver"`
	Node   string `json:"node"`
	PV     string `json:"persistentVolume,omitempty"`
	// Since is when the detach was asked for (the deletionTimestamp), nil
	// when only a detach error keeps the VolumeAttachment here.
	Since *metav1.Time `json:"since,omitempty"`
	// Mode is "fenced" when the attacher recorded a fenced detach on the
	// VolumeAttachment, else "plain".
	Mode string `json:"mode"`
	// Attached is status.attached: the volume is still attached as far
	// as the attacher knows.
	Attached bool `json:"attached"`
	// Detail is the fence record's reason and time, and the detach error.
	Detail string `json:"detail,omitempty"`
}

// BuildStatus turns a snapshot into the status report; maxEvents bounds the
// Events kept (the most recent).
func BuildStatus(s *Snapshot, maxEvents int) Status {
	st := Status{FencingAPI: s.FencingAPI, Drivers: []DriverStatus{}, Nodes: []NodeStatus{},
		FencingRequests: []RequestStatus{}, Coverage: []CoverageStatus{}, Detaches: []DetachStatus{}, StorageFences: []StorageFenceStatus{}, Events: []EventStatus{}}
	for _, d := range s.Drivers {
		st.Drivers = append(st.Drivers, driverStatus(d, s))
	}
	for _, n := range s.Nodes {
		if marks := nodeMarks(n); len(marks) > 0 {
			st.Nodes = append(st.Nodes, NodeStatus{Name: n.Name, Ready: readyStatus(n), CutOff: string(cutoff.NodeReason(n, true)),
				InternalIP: internalIP(n), BootID: n.Status.NodeInfo.BootID, Marks: marks})
		}
	}
	for _, r := range s.Requests {
		st.FencingRequests = append(st.FencingRequests, requestStatus(r))
	}
	slices.SortFunc(st.FencingRequests, func(a, b RequestStatus) int {
		return cmp.Or(a.Created.Compare(b.Created.Time), strings.Compare(a.Name, b.Name))
	})
	for _, p := range s.Policies {
		st.Coverage = append(st.Coverage, coverageStatus(p))
	}
	slices.SortFunc(st.Coverage, func(a, b CoverageStatus) int { return strings.Compare(a.Policy, b.Policy) })
	for _, va := range s.VolumeAttachments {
		if d, ok := detachStatus(va); ok {
			st.Detaches = append(st.Detaches, d)
		}
	}
	st.StorageFencesNote = s.StorageFencesNote
	for _, sf := range s.StorageFences {
		st.StorageFences = append(st.StorageFences, storageFenceStatus(sf))
	}
	slices.SortFunc(st.StorageFences, func(a, b StorageFenceStatus) int {
		return cmp.Or(strings.Compare(a.Driver, b.Driver), strings.Compare(a.Node, b.Node), strings.Compare(a.NodeID, b.NodeID))
	})
	events := s.Events
	if maxEvents >= 0 && len(events) > maxEvents {
		events = events[len(events)-maxEvents:]
	}
	for _, e := range events {
		st.Events = append(st.Events, eventStatus(e))
	}
	return st
}

func driverStatus(d *storagev1.CSIDriver, s *Snapshot) DriverStatus {
	ds := DriverStatus{Name: d.Name, AttachRequired: d.Spec.AttachRequired == nil || *d.Spec.AttachRequired, SafeDetach: cutoff.SafeDetachEnabled(d)}
	if l := newestHeartbeat(s.Heartbeats, d.Name); l != nil {
		ds.UnpublishFence = l.Annotations[names.HeartbeatUnpublishFenceAnnotation]
		ds.AttacherVersion = l.Annotations[names.HeartbeatVersionAnnotation]
		ds.Heartbeat = l.Namespace + "/" + l.Name
		if r := renewed(l); !r.IsZero() {
			ds.Renewed = &r
		}
	}
	for _, va := range s.VolumeAttachments {
		if va.Spec.Attacher == d.Name {
			ds.VolumeAttachments++
		}
	}
	ev := cutoff.AttacherServes(d.Name, cutoff.Snapshot(s.Heartbeats, s.Now), d, s.Now)
	ds.Serving, ds.Missing = ev.Serving, ev.Missing
	return ds
}

// newestHeartbeat returns the driver's most recently renewed heartbeat Lease.
func newestHeartbeat(leases []*coordinationv1.Lease, driver string) *coordinationv1.Lease {
	var best *coordinationv1.Lease
	for _, l := range leases {
		if l.Annotations[names.HeartbeatDriverAnnotation] != driver {
			continue
		}
		if best == nil || renewed(l).After(renewed(best).Time) {
			best = l
		}
	}
	return best
}

func renewed(l *coordinationv1.Lease) metav1.Time {
	if l.Spec.RenewTime == nil {
		return metav1.Time{}
	}
	return metav1.Time{Time: l.Spec.RenewTime.Time}
}

// markTaints are the taints status reports, Fenceline's and KEP-2268's.
var markTaints = []string{names.OutOfServiceTaint, names.QuarantineTaint, names.ForceEvictionTaint, names.FencingRequiredTaint, names.FencingTriagedTaint}

// markConditions are the node-fencing conditions status reports.
var markConditions = []string{names.FencingTriagedCondition, names.FencingRequiredCondition, names.FencingCompleteCondition}

// nodeMarks lists the node's taints of markTaints and its node-fencing
// conditions. A node whose conditions are all False (unfenced) and that has
// no such taint has no mark.
func nodeMarks(n *v1.Node) []Mark {
	var marks []Mark
	for _, t := range n.Spec.Taints {
		if !slices.Contains(markTaints, t.Key) {
			continue
		}
		m := Mark{Kind: "taint", Name: t.Key + ":" + string(t.Effect), Since: t.TimeAdded}
		if t.Key == names.OutOfServiceTaint {
			switch owner, by := n.Annotations[names.OutOfServiceOwnerAnnotation], n.Annotations[names.OutOfServiceAppliedByAnnotation]; {
			case owner != "":
				m.Detail = "added by Fenceline for FencingRequest UID " + owner
			case by != "":
				m.Detail = "applied by " + by + " (" + names.OutOfServiceAppliedByAnnotation + "); Fenceline never removes it"
			default:
				m.Detail = "not added by Fenceline"
			}
		}
		marks = append(marks, m)
	}
	active := false
	var conds []Mark
	for _, typ := range markConditions {
		c := nodeutil.Condition(n, typ)
		if c == nil {
			continue
		}
		active = active || c.Status == v1.ConditionTrue
		since := c.LastTransitionTime
		conds = append(conds, Mark{Kind: "condition", Name: typ + "=" + string(c.Status), Since: &since, Detail: joinNonEmpty(": ", c.Reason, c.Message)})
	}
	if active || len(marks) > 0 {
		marks = append(marks, conds...)
	}
	// An ask on the Node (its request is gone) stays until node-fencing
	// carried it out.
	if ask := askOf(n.Annotations); ask != "" {
		marks = append(marks, Mark{Kind: "ask", Name: names.UnfenceAnnotation, Detail: ask})
	}
	return marks
}

// internalIP is the node's first InternalIP address, "" when it has none.
func internalIP(n *v1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func readyStatus(n *v1.Node) string {
	if c := nodeutil.ReadyCondition(n); c != nil {
		return string(c.Status)
	}
	return string(v1.ConditionUnknown)
}

func requestStatus(r *fencingv1alpha1.FencingRequest) RequestStatus {
	rs := RequestStatus{Name: r.Name, Node: r.Spec.NodeName, Phase: string(r.Status.Phase), Reason: r.Spec.Reason,
		Requester: r.Spec.Requester, Created: r.CreationTimestamp, Message: r.Status.ErrorMessage,
		UID: r.UID, Policy: r.Spec.PolicyName, Action: string(r.Spec.Action)}
	if rs.Phase == "" {
		rs.Phase = string(fencingv1alpha1.FencingPhasePending)
	}
	var latest *metav1.Condition
	for i := range r.Status.Conditions {
		c := &r.Status.Conditions[i]
		if c.Type == fencingv1alpha1.FencingRequestStorageFenced {
			// A report beside the lifecycle, written in the same sync as
			// its notes: the message says where the request is.
			continue
		}
		if latest == nil || !c.LastTransitionTime.Before(&latest.LastTransitionTime) {
			latest = c
		}
	}
	if rs.Message == "" && latest != nil {
		rs.Message = joinNonEmpty(": ", latest.Type+"="+string(latest.Status)+" "+latest.Reason, latest.Message)
	}
	switch r.Status.Phase {
	case fencingv1alpha1.FencingPhaseRecovered, fencingv1alpha1.FencingPhaseCancelled, fencingv1alpha1.FencingPhaseFailed:
	default:
		rs.Ask = askOf(r.Annotations)
	}
	return rs
}

// askOf describes an operator's unfence ask that node-fencing has not
// carried out yet ("" when there is none): the plugin only asks, the
// controller acts, so an ask can wait (for a reboot, a verification).
func askOf(a map[string]string) string {
	who, ok := a[names.UnfenceAnnotation]
	if !ok {
		return ""
	}
	ask := "unfence asked by " + who
	if v := a[names.UnfenceVerifiedAnnotation]; v != "" {
		ask += " (verified: " + v + ")"
	}
	return ask
}

// detachStatus reports a VolumeAttachment being detached (deleted, or with
// a detach error); ok is false for any other.
func detachStatus(va *storagev1.VolumeAttachment) (DetachStatus, bool) {
	if va.DeletionTimestamp == nil && va.Status.DetachError == nil {
		return DetachStatus{}, false
	}
	d := DetachStatus{Name: va.Name, Driver: va.Spec.Attacher, Node: va.Spec.NodeName, Since: va.DeletionTimestamp,
		Mode: string(fencing.ActionPlain), Attached: va.Status.Attached}
	if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
		d.PV = *pv
	}
	var details []string
	for _, f := range []struct {
		what string
		read func(*storagev1.VolumeAttachment) (*cutoff.Record, error)
	}{{"fence recorded", fencing.RecordOf}, {"fence intent", cutoff.IntentOf}} {
		rec, err := f.read(va)
		switch {
		case err != nil:
			d.Mode = string(fencing.ActionFenced)
			details = append(details, err.Error())
		case rec != nil:
			d.Mode = string(fencing.ActionFenced)
			details = append(details, fmt.Sprintf("%s %s by %s (%s, CSI node %s)", f.what, rec.Since, rec.Writer(), rec.Reason, orUnknown(rec.NodeID)))
		}
	}
	if e := va.Status.DetachError; e != nil {
		details = append(details, "detach error: "+e.Message)
	}
	d.Detail = strings.Join(details, "; ")
	return d, true
}

func coverageStatus(p *fencingv1alpha1.FencePolicy) CoverageStatus {
	c := CoverageStatus{Policy: p.Name, Paused: p.Spec.Paused}
	if cov := p.Status.Coverage; cov != nil {
		c.Known, c.Selected, c.Uncovered, c.Nodes = true, cov.SelectedNodes, cov.UncoveredNodes, cov.Uncovered
		c.UpToDate = cov.ObservedGeneration == p.Generation
	}
	return c
}

func orUnknown(s string) string {
	if s == "" {
		return "not known to the writer"
	}
	return s
}

func joinNonEmpty(sep string, parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, sep)
}

func storageFenceStatus(sf *fencingv1alpha1.StorageFence) StorageFenceStatus {
	out := StorageFenceStatus{Name: sf.Name, Driver: sf.Spec.Driver, Node: sf.Status.NodeName, NodeID: sf.Spec.NodeID, Fenced: sf.Status.FencedOff(), Listed: sf.Status.ListTime}
	if l := sf.Spec.Lift; l != nil {
		out.Lift = "asked by " + l.RequestedBy
		if c := meta.FindStatusCondition(sf.Status.Conditions, fencingv1alpha1.StorageFenceLifted); c != nil {
			out.Lift += "; " + c.Reason + ": " + c.Message
		}
	}
	return out
}
