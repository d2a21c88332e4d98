package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=sf,categories=fenceline
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Node ID",type=string,JSONPath=`.spec.nodeID`,priority=1
// +kubebuilder:printcolumn:name="Volumes",type=integer,JSONPath=`.status.volumeCount`
// +kubebuilder:printcolumn:name="All Volumes",type=boolean,JSONPath=`.status.allVolumes`
// +kubebuilder:printcolumn:name="Lift",type=string,JSONPath=`.status.conditions[?(@.type=="Lifted")].reason`
// +kubebuilder:printcolumn:name="Listed",type=date,JSONPath=`.status.listTime`

// StorageFence shows the fences a CSI driver's storage enforces against one
// node, as the driver's fenceline-attacher last read them with ListFences:
// one object per driver and node ID, created while the storage reports a
// fence and deleted once it reports none. An operator asks for the fences
// to be lifted by setting spec.lift (kubectl fenceline lift-fence); the
// attacher lifts them only with the evidence that the node is safe again.
type StorageFence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec StorageFenceSpec `json:"spec"`
	// +optional
	Status StorageFenceReport `json:"status,omitempty"`
}

// StorageFenceSpec names the driver and the node, and carries a lift
// request.
type StorageFenceSpec struct {
	// Driver is the CSI driver whose storage holds the fences.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="driver is immutable"
	Driver string `json:"driver"`
	// NodeID is the node the fences cut off, as the driver names it (the
	// node ID of its CSI calls).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeID is immutable"
	NodeID string `json:"nodeID"`
	// Lift, when set, asks the attacher to lift every fence of the node on
	// this driver's storage.
	// +optional
	Lift *FenceLiftRequest `json:"lift,omitempty"`
}

// FenceLiftRequest is an operator's request to lift a node's storage
// fences. A lift lets a node that still holds a fenced volume write to it
// again, so the attacher carries the request out only on evidence that the
// node no longer uses the fenced volumes: its Node is Ready, nothing cuts
// it off (no out-of-service, quarantine or fencing taint), its kubelet
// reports none of them in use, and no fenced detach from it is pending. A
// node no Node object names shows nothing: its fences are lifted only when
// the requester confirms the machine is gone (ConfirmedGone).
type FenceLiftRequest struct {
	// RequestedBy says who asked, for the Events and the driver's logs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RequestedBy string `json:"requestedBy"`
	// Reason says why, for the same readers.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// ConfirmedGone states, for a node ID no Node object names, that its
	// machine is powered off or destroyed, as an out-of-service taint
	// states it of a node: nothing else can show that a machine which lost
	// its Node object stopped writing.
	// +optional
	ConfirmedGone bool `json:"confirmedGone,omitempty"`
}

// StorageFenceReport is what the storage reported and what became of a
// lift request.
type StorageFenceReport struct {
	// NodeName is the Kubernetes node whose CSINode gives the driver this
	// node ID; empty when no node does (one deleted, or not yet
	// registered).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// Fences are the fences the storage reported, at most MaxReportedFences
	// (Truncated says how many more there were).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Fences []ReportedFence `json:"fences,omitempty"`
	// Truncated counts the fences left out of Fences.
	// +optional
	Truncated int32 `json:"truncated,omitempty"`
	// AllVolumes is true when a fence cuts the node off from every volume
	// of the driver.
	// +optional
	AllVolumes bool `json:"allVolumes,omitempty"`
	// VolumeCount is how many volumes the node is cut off from by
	// per-volume fences.
	// +optional
	VolumeCount int32 `json:"volumeCount,omitempty"`
	// ListTime is when the attacher last read the fences.
	// +optional
	ListTime *metav1.Time `json:"listTime,omitempty"`
	// Conditions: Lifted (True once lifted; False with the reason a lift
	// request waits or was refused).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxReportedFences and MaxReportedVolumes bound a StorageFence's status,
// so that a node fenced off thousands of volumes still fits one object.
const (
	MaxReportedFences  = 64
	MaxReportedVolumes = 256
)

// FencedOff says what the report's fences cut the node off from: "every
// volume", "1 volume" or "N volumes".
func (r StorageFenceReport) FencedOff() string {
	switch {
	case r.AllVolumes:
		return "every volume"
	case r.VolumeCount == 1:
		return "1 volume"
	}
	return fmt.Sprintf("%d volumes", r.VolumeCount)
}

// StorageFenceLifted is the condition type of a lift request's outcome.
const StorageFenceLifted = "Lifted"

// ReportedFence is one fence as the driver's ListFences returned it.
type ReportedFence struct {
	// VolumeIDs are the volumes the fence cuts the node off from, at most
	// MaxReportedVolumes; empty when AllVolumes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=256
	VolumeIDs []string `json:"volumeIDs,omitempty"`
	// MoreVolumes counts the volume IDs left out of VolumeIDs.
	// +optional
	MoreVolumes int32 `json:"moreVolumes,omitempty"`
	// AllVolumes: the fence is node-wide.
	// +optional
	AllVolumes bool `json:"allVolumes,omitempty"`
	// FencedAt is when the storage set the fence, by the storage's clock;
	// shown, never compared.
	// +optional
	FencedAt *metav1.Time `json:"fencedAt,omitempty"`
	// Details is the driver's description for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Details string `json:"details,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// StorageFenceList is a list of StorageFences.
type StorageFenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageFence `json:"items"`
}
