package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=fc,categories=fenceline
// +kubebuilder:printcolumn:name="Method",type=string,JSONPath=`.spec.method`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="Verify",type=string,JSONPath=`.spec.verify`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FenceClass says how to fence, as a StorageClass says how to provision:
// the method, its settings, the credentials, the timeouts and the retries.
// Per-node addresses live in FenceTarget.
//
// Invariants: a power method always verifies the power state it set
// (verify None is rejected); settings are given only for the chosen method;
// the exec method names its agent.
type FenceClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FenceClassSpec `json:"spec"`
}

// FenceMethod is how a fence is carried out.
// +kubebuilder:validation:Enum=Redfish;IPMI;Exec
type FenceMethod string

// The fence methods. All three act on power.
const (
	// FenceMethodRedfish uses the node's BMC through the DMTF Redfish API.
	FenceMethodRedfish FenceMethod = "Redfish"
	// FenceMethodIPMI uses the node's BMC through IPMI over LAN.
	FenceMethodIPMI FenceMethod = "IPMI"
	// FenceMethodExec runs a fence agent (fence_ipmilan, fence_redfish,
	// a PDU agent, ...) with fence-agents-remediation compatible
	// parameters.
	FenceMethodExec FenceMethod = "Exec"
)

// VerifyMode is how a fence proves that it worked.
// +kubebuilder:validation:Enum=PowerState;None
type VerifyMode string

const (
	// VerifyPowerState polls the device until it reads back Off.
	VerifyPowerState VerifyMode = "PowerState"
	// VerifyNone trusts the action; rejected for every power method.
	VerifyNone VerifyMode = "None"
)

// FenceClassSpec is the how of a fence.
// +kubebuilder:validation:XValidation:rule="!(self.verify == 'None' && self.method in ['Redfish', 'IPMI', 'Exec'])",message="verify None is not allowed for power methods (Redfish, IPMI, Exec): only a read-back power state proves a node off"
// +kubebuilder:validation:XValidation:rule="self.method == 'Exec' ? has(self.exec) : !has(self.exec)",message="exec settings are required with method Exec and allowed only with it"
// +kubebuilder:validation:XValidation:rule="!has(self.redfish) || self.method == 'Redfish'",message="redfish settings are allowed only with method Redfish"
// +kubebuilder:validation:XValidation:rule="!has(self.ipmi) || self.method == 'IPMI'",message="ipmi settings are allowed only with method IPMI"
type FenceClassSpec struct {
	// Method is how to fence.
	// +required
	Method FenceMethod `json:"method"`

	// Action is what to do to the node's power.
	// +optional
	// +default="Off"
	Action FenceAction `json:"action,omitempty"`

	// Redfish holds the settings of method Redfish; unset means defaults.
	// +optional
	Redfish *RedfishSettings `json:"redfish,omitempty"`
	// IPMI holds the settings of method IPMI; unset means defaults.
	// +optional
	IPMI *IPMISettings `json:"ipmi,omitempty"`
	// Exec holds the settings of method Exec; required with it.
	// +optional
	Exec *ExecSettings `json:"exec,omitempty"`

	// CredentialsSecretRef is the default Secret with the device
	// credentials; a FenceTarget endpoint may name its own.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// Timeouts bound each step of one attempt.
	// +optional
	// +default={}
	Timeouts FenceTimeouts `json:"timeouts,omitempty"`

	// Retries is how many times a failed attempt is retried within the
	// level's timeout (as Pacemaker, retries share the time budget).
	// +optional
	// +default=2
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	Retries *int32 `json:"retries,omitempty"`

	// Verify is how the fence proves it worked.
	// +optional
	// +default="PowerState"
	Verify VerifyMode `json:"verify,omitempty"`

	// SharesPowerWithNode says the device loses power with the node (an
	// on-board BMC): a dead node may mean a dead device. A policy whose
	// only level uses such a class needs storageFence Required; that is a
	// cross-object rule the controller enforces.
	// +optional
	SharesPowerWithNode bool `json:"sharesPowerWithNode,omitempty"`
}

// RedfishSettings are the settings of method Redfish.
type RedfishSettings struct {
	// ResetType is the ComputerSystem.Reset type used for power-off.
	// +optional
	// +default="ForceOff"
	// +kubebuilder:validation:Enum=ForceOff
	ResetType string `json:"resetType,omitempty"`
	// InsecureTLS skips the verification of the BMC's certificate.
	// +optional
	InsecureTLS bool `json:"insecureTLS,omitempty"`
}

// IPMISettings are the settings of method IPMI.
type IPMISettings struct {
	// Interface is the IPMI LAN interface; lanplus is IPMI 2.0.
	// +optional
	// +default="lanplus"
	// +kubebuilder:validation:Enum=lanplus;lan
	Interface string `json:"interface,omitempty"`
	// CipherSuite is the IPMI 2.0 cipher suite ID.
	// +optional
	// +default=17
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=17
	CipherSuite *int32 `json:"cipherSuite,omitempty"`
	// Privilege is the IPMI privilege level of the session.
	// +optional
	// +default="ADMINISTRATOR"
	// +kubebuilder:validation:Enum=ADMINISTRATOR;OPERATOR;USER
	Privilege string `json:"privilege,omitempty"`
}

// ExecSettings are the settings of method Exec: a fence agent run with
// parameters compatible with fence-agents-remediation's (the key is the
// long option without its leading dashes, e.g. "lanplus": "1").
type ExecSettings struct {
	// Agent is the fence agent executable, e.g. fence_ipmilan.
	// +required
	// +kubebuilder:validation:Pattern=`^fence_[a-z0-9_]+$`
	// +kubebuilder:validation:MaxLength=64
	Agent string `json:"agent"`
	// Image is reserved for running the agent from another container
	// image; it must be empty until that is implemented: the agent runs
	// from the fence agent's own image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == ''",message="exec.image is not supported yet; the agent runs from the fence agent's own image"
	Image string `json:"image,omitempty"`
	// Args are the agent's parameters. The action, address, plug and
	// credentials come from the request, the FenceTarget and the Secret,
	// never from here.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z][a-z0-9_-]*$') && !(k in ['action', 'ip', 'plug', 'username', 'password', 'password-script']))",message="args keys are long options without dashes; action, ip, plug, username, password and password-script are set by Fenceline"
	Args map[string]string `json:"args,omitempty"`
}

// FenceTimeouts bound the steps of one fence attempt.
// +kubebuilder:validation:XValidation:rule="!has(self.pollInterval) || !has(self.verify) || duration(self.pollInterval) <= duration(self.verify)",message="pollInterval must not exceed verify"
type FenceTimeouts struct {
	// Action bounds the power action request.
	// +optional
	// +default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="action timeout must be between 1s and 10m"
	Action *metav1.Duration `json:"action,omitempty"`
	// Verify bounds the read-back of the power state after the action.
	// +optional
	// +default="15s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="verify timeout must be between 1s and 10m"
	Verify *metav1.Duration `json:"verify,omitempty"`
	// PollInterval is the time between two power-state reads.
	// +optional
	// +default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1m')",message="pollInterval must be between 100ms and 1m"
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FenceClassList is a list of FenceClasses.
type FenceClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FenceClass `json:"items"`
}
