package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced,shortName=frem,categories=fenceline
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Request",type=string,JSONPath=`.status.fencingRequestName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Processing",type=string,JSONPath=`.status.conditions[?(@.type=="Processing")].status`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FencelineRemediation is an external remediation request, as a health
// checker that follows the external-remediation contract creates it from a
// FencelineRemediationTemplate: medik8s NodeHealthCheck names it after the
// unhealthy Node (or sets the annotation remediation.medik8s.io/node-name),
// in the template's namespace, owned by the NodeHealthCheck; Cluster API's
// MachineHealthCheck names it after the unhealthy Machine, in the Machine's
// namespace, owned by the Machine, and the node is the one the Machine's
// status.nodeRef names. fenceline-controller's remediation controller
// turns it into one approved FencingRequest for that node and reports the
// request's progress in the conditions the checkers read. The checker
// deletes it once the node is healthy again; the remediation is never
// deleted by Fenceline.
type FencelineRemediation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec FencelineRemediationSpec `json:"spec,omitempty"`
	// +optional
	Status FencelineRemediationStatus `json:"status,omitempty"`
}

// FencelineRemediationSpec is what the template gives every remediation
// made from it. The node is not part of it: the checker names the
// remediation after the node (or the Machine).
type FencelineRemediationSpec struct {
	// PolicyName is the FencePolicy the FencingRequest follows; empty
	// means the policy whose nodeSelector matches the node.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PolicyName string `json:"policyName,omitempty"`
}

// Condition types of a FencelineRemediation: the ones of the
// external-remediation contract (medik8s/common pkg/conditions).
const (
	// RemediationProcessing is True while the fence is asked for or runs,
	// False once it ended one way or the other.
	RemediationProcessing = "Processing"
	// RemediationSucceeded is True once the node is fenced and its
	// workloads may go (FencingRequest Fenced with the out-of-service
	// taint applied, or later), False when the fence failed or was
	// cancelled, Unknown before.
	RemediationSucceeded = "Succeeded"
	// RemediationPermanentNodeDeletionExpected tells NodeHealthCheck that
	// the remediator deletes the Node. Fenceline never deletes a Node and
	// never sets it; the type is named here so that the contract is in one
	// place.
	RemediationPermanentNodeDeletionExpected = "PermanentNodeDeletionExpected"
)

// FencelineRemediationStatus is how the remediation goes. Only
// fenceline-controller writes it.
type FencelineRemediationStatus struct {
	// Conditions: Processing and Succeeded, as the external-remediation
	// contract names them.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// NodeName is the node the remediation fences.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// FencingRequestName is the FencingRequest that fences the node: the
	// one the remediation created, or the node's open request it follows.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	FencingRequestName string `json:"fencingRequestName,omitempty"`

	// Phase is the FencingRequest's phase when last seen.
	// +optional
	Phase FencingPhase `json:"phase,omitempty"`

	// LastUpdateTime is when the controller last changed this status.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FencelineRemediationList is a list of FencelineRemediations.
type FencelineRemediationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencelineRemediation `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Namespaced,shortName=fremt,categories=fenceline
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.template.spec.policyName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FencelineRemediationTemplate is what a health checker's remediation
// template reference names (NodeHealthCheck spec.remediationTemplate or
// an escalating remediation's, MachineHealthCheck's remediation template):
// the checker copies spec.template.spec into each FencelineRemediation it
// creates.
type FencelineRemediationTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FencelineRemediationTemplateSpec `json:"spec"`
}

// FencelineRemediationTemplateSpec holds the template.
type FencelineRemediationTemplateSpec struct {
	// Template is the remediation each checker creates.
	// +required
	Template FencelineRemediationTemplateResource `json:"template"`
}

// FencelineRemediationTemplateResource is the remediation's spec, under
// spec.template.spec where the checkers read it.
type FencelineRemediationTemplateResource struct {
	// Spec is copied into every FencelineRemediation made from the
	// template.
	// +required
	Spec FencelineRemediationSpec `json:"spec"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FencelineRemediationTemplateList is a list of
// FencelineRemediationTemplates.
type FencelineRemediationTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencelineRemediationTemplate `json:"items"`
}
