package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=fr,categories=fenceline
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Approved",type=boolean,JSONPath=`.spec.approved`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FencingRequest asks for one Node to be fenced and records how that went,
// as a Job records a run. A controller creates it when a policy's detection
// fires; an administrator may create one by hand.
//
// Invariants: spec.nodeName never changes; spec.action and a set
// spec.nodeUID never change; once spec.approved is true the whole spec is
// frozen. At most one non-terminal request per node is a cross-object rule
// that the controller enforces.
type FencingRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FencingRequestSpec `json:"spec"`
	// +optional
	Status FencingRequestStatus `json:"status,omitempty"`
}

// FencingRequestSpec is what to fence and why.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.approved) || !oldSelf.approved || self == oldSelf",message="spec is immutable once approved is true"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeUID) || (has(self.nodeUID) && self.nodeUID == oldSelf.nodeUID)",message="nodeUID is immutable once set"
type FencingRequestSpec struct {
	// NodeName is the Node to fence. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// NodeUID is the UID of the Node to fence. When set, a Node recreated
	// under the same name (another UID) is never fenced by this request.
	// +optional
	NodeUID types.UID `json:"nodeUID,omitempty"`

	// PolicyName is the FencePolicy to follow; empty means the policy
	// whose nodeSelector matches the node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PolicyName string `json:"policyName,omitempty"`

	// Reason says why the node is to be fenced, in CamelCase, e.g.
	// LeaseExpired, ReadyUnknown, Manual, StorageReportedDisconnect.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// Requester is who asked: "controller" or "user:<name>".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Requester string `json:"requester,omitempty"`

	// Action is what to do to the node's power. Immutable.
	// +optional
	// +default="Off"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="action is immutable"
	Action FenceAction `json:"action,omitempty"`

	// Approved is the manual approval gate: with a policy whose approval is
	// Manual, the controller stops at phase Triaged until it is true. Unset
	// means the policy decides.
	// +optional
	Approved *bool `json:"approved,omitempty"`
}

// FencingPhase is the coarse state of a FencingRequest. Fenced, Recovered,
// Failed and Cancelled are terminal for the fence itself; only Fenced
// moves on (to Recovering and Recovered).
// +kubebuilder:validation:Enum=Pending;Triaged;Fencing;Fenced;Recovering;Recovered;Failed;Cancelled
type FencingPhase string

// The phases of a FencingRequest, in the order a successful one goes
// through them.
const (
	FencingPhasePending    FencingPhase = "Pending"
	FencingPhaseTriaged    FencingPhase = "Triaged"
	FencingPhaseFencing    FencingPhase = "Fencing"
	FencingPhaseFenced     FencingPhase = "Fenced"
	FencingPhaseRecovering FencingPhase = "Recovering"
	FencingPhaseRecovered  FencingPhase = "Recovered"
	FencingPhaseFailed     FencingPhase = "Failed"
	FencingPhaseCancelled  FencingPhase = "Cancelled"
)

// Condition types of a FencingRequest.
const (
	FencingRequestTriaged             = "Triaged"
	FencingRequestRequired            = "Required"
	FencingRequestComplete            = "Complete"
	FencingRequestStorageFenced       = "StorageFenced"
	FencingRequestOutOfServiceApplied = "OutOfServiceApplied"
	FencingRequestRecovered           = "Recovered"
	FencingRequestFailed              = "Failed"
)

// MaxFenceAttempts bounds FencingRequestStatus.Attempts; the controller drops
// the oldest attempt to add a new one.
const MaxFenceAttempts = 16

// FencingRequestStatus is the progress and result of a FencingRequest. Only
// the controller writes it (status subresource and RBAC).
type FencingRequestStatus struct {
	// ObservedGeneration is the spec generation the status is about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is the coarse state.
	// +optional
	Phase FencingPhase `json:"phase,omitempty"`

	// Conditions: Triaged, Required, Complete, StorageFenced,
	// OutOfServiceApplied, Recovered, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// StartTime is when the controller first acted on the request.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// FencedTime is when the fence was verified (Complete became True).
	// +optional
	FencedTime *metav1.Time `json:"fencedTime,omitempty"`
	// CompletionTime is when the request reached Recovered, Failed or
	// Cancelled.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// BootIDAtFence is the node's status.nodeInfo.bootID when it was
	// fenced. The node is unfenced only once it reports another boot ID.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	BootIDAtFence string `json:"bootIDAtFence,omitempty"`

	// FailedRounds counts the rounds the fence agent ran through every
	// level without one succeeding. At the policy's maxAttempts the request
	// is Failed. The agent waits between rounds, longer after each.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedRounds int32 `json:"failedRounds,omitempty"`

	// Attempts are the fence attempts, oldest first, at most
	// MaxFenceAttempts (the oldest are dropped).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Attempts []FenceAttempt `json:"attempts,omitempty"`

	// Storage holds, per CSI driver, the result of the storage fence.
	// +optional
	// +listType=map
	// +listMapKey=driver
	// +kubebuilder:validation:MaxItems=64
	Storage []StorageFenceStatus `json:"storage,omitempty"`

	// ErrorReason is a short CamelCase reason for a terminal failure.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ErrorReason string `json:"errorReason,omitempty"`
	// ErrorMessage is a human-readable account of a terminal failure.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	ErrorMessage string `json:"errorMessage,omitempty"`

	// ProviderStatus is free-form status of the fence method.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	ProviderStatus *runtime.RawExtension `json:"providerStatus,omitempty"`
}

// FenceAttemptResult is how one fence attempt ended.
// +kubebuilder:validation:Enum=Succeeded;Failed;TimedOut
type FenceAttemptResult string

// The results of a fence attempt.
const (
	FenceAttemptSucceeded FenceAttemptResult = "Succeeded"
	FenceAttemptFailed    FenceAttemptResult = "Failed"
	FenceAttemptTimedOut  FenceAttemptResult = "TimedOut"
)

// FenceAttempt is one try of one FenceClass of one policy level. Succeeded
// means verified: VerifiedPowerState is Off. Every method Fenceline has is
// a power method; a storage or fabric method with its own proof will widen
// this rule when it comes.
// +kubebuilder:validation:XValidation:rule="!has(self.result) || self.result != 'Succeeded' || (has(self.verifiedPowerState) && self.verifiedPowerState == 'Off')",message="a Succeeded attempt must carry verifiedPowerState Off: only a read-back Off proves a node off"
type FenceAttempt struct {
	// Level is the policy level's index.
	// +required
	// +kubebuilder:validation:Minimum=1
	Level int32 `json:"level"`
	// FenceClass is the FenceClass used.
	// +required
	// +kubebuilder:validation:MaxLength=253
	FenceClass string `json:"fenceClass"`
	// Method is the FenceClass's method at the time.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Method string `json:"method"`
	// StartTime is when the attempt began.
	// +required
	StartTime metav1.Time `json:"startTime"`
	// EndTime is when it ended; unset while it runs.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Result is unset while the attempt runs.
	// +optional
	Result FenceAttemptResult `json:"result,omitempty"`
	// VerifiedPowerState is the power state read back from the device
	// after the action (On, Off or Unknown); empty while nothing was read.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	VerifiedPowerState string `json:"verifiedPowerState,omitempty"`
	// Message is a human-readable account.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// StorageFenceStatus is the storage fence of one CSI driver.
type StorageFenceStatus struct {
	// Driver is the CSI driver name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Driver string `json:"driver"`
	// Fenced is true once every volume of the driver on the node is cut off.
	// +optional
	Fenced bool `json:"fenced,omitempty"`
	// VolumeAttachments are the VolumeAttachments detached with fence=true.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	VolumeAttachments []string `json:"volumeAttachments,omitempty"`
	// NetworkFences are the NetworkFence objects created for the node.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	NetworkFences []string `json:"networkFences,omitempty"`
	// Message is a human-readable account.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FencingRequestList is a list of FencingRequests.
type FencingRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencingRequest `json:"items"`
}
