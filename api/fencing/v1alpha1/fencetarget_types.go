package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=ft,categories=fenceline
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Last Probe",type=date,JSONPath=`.status.lastProbeTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FenceTarget holds one node's fencing endpoints; its name is the node's
// name. Its status comes from a periodic read-only probe, so that a broken
// fencing device shows before the node it guards dies.
//
// Invariant: at most one endpoint per FenceClass.
type FenceTarget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FenceTargetSpec `json:"spec"`
	// +optional
	Status FenceTargetStatus `json:"status,omitempty"`
}

// FenceTargetSpec lists a node's fencing endpoints.
type FenceTargetSpec struct {
	// Endpoints are the node's fencing devices, one per FenceClass.
	// +required
	// +listType=map
	// +listMapKey=fenceClassName
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Endpoints []FenceEndpoint `json:"endpoints"`
}

// FenceEndpoint is how one FenceClass reaches this node's device.
// +kubebuilder:validation:XValidation:rule="!(has(self.systemID) && has(self.plug))",message="systemID and plug are mutually exclusive"
type FenceEndpoint struct {
	// FenceClassName is the FenceClass this endpoint is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	FenceClassName string `json:"fenceClassName"`
	// Address is the device's address: a URL for Redfish
	// (https://10.0.0.5), a host or host:port for IPMI and exec agents.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Address string `json:"address"`
	// SystemID is the Redfish ComputerSystem ID; empty means the only one.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	SystemID string `json:"systemID,omitempty"`
	// Plug is the outlet or VM name for an exec agent (--plug).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Plug string `json:"plug,omitempty"`
	// CredentialsSecretRef overrides the FenceClass's credentials.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
}

// PowerState is a node's power state as a fencing device reports it.
// +kubebuilder:validation:Enum=On;Off;PoweringOn;PoweringOff;Unknown
type PowerState string

// The power states a probe reports.
const (
	PowerStateOn          PowerState = "On"
	PowerStateOff         PowerState = "Off"
	PowerStatePoweringOn  PowerState = "PoweringOn"
	PowerStatePoweringOff PowerState = "PoweringOff"
	PowerStateUnknown     PowerState = "Unknown"
)

// FenceTargetReachable is the condition type that is True when the last
// probe reached every endpoint and read a power state.
const FenceTargetReachable = "Reachable"

// FenceTargetStatus is the result of the last probe.
type FenceTargetStatus struct {
	// ObservedGeneration is the spec generation last probed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Reachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// PowerState is the power state the last probe read.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`
	// LastProbeTime is when the last probe ended.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// PowerCheck answers the last power check asked with the annotation
	// fenceline.io/power-check: the fence agent read every endpoint after
	// it saw the ask.
	// +optional
	PowerCheck *FencePowerCheck `json:"powerCheck,omitempty"`
}

// FencePowerCheck is the answer to one power check.
type FencePowerCheck struct {
	// Token is the ask's annotation value this answers.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Token string `json:"token"`
	// PowerState is the state every endpoint agreed on, read after the
	// ask; Unknown when one did not answer or they disagreed.
	// +required
	PowerState PowerState `json:"powerState"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FenceTargetList is a list of FenceTargets.
type FenceTargetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FenceTarget `json:"items"`
}
