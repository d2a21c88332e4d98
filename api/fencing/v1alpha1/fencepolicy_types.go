package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:resource:scope=Cluster,shortName=fp,categories=fenceline
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.detection.approval`
// +kubebuilder:printcolumn:name="Storage Fence",type=string,JSONPath=`.spec.storageFence`
// +kubebuilder:printcolumn:name="Max Concurrent",type=integer,JSONPath=`.spec.stormGuard.maxConcurrentFencing`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.coverage.selectedNodes`
// +kubebuilder:printcolumn:name="Uncovered",type=integer,JSONPath=`.status.coverage.uncoveredNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// FencePolicy says when to fence the nodes it selects, in which order to
// try the fence classes, how much to fence at once, and how a fenced node
// comes back.
//
// Invariants checked by the API server: level indexes are unique and
// ascending. Checked by the controller, because they span objects (CEL
// sees one object): every named FenceClass exists; a policy whose only
// level uses a class with sharesPowerWithNode and a power method needs
// storageFence Required; a node matched by two policies is not fenced.
type FencePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec FencePolicySpec `json:"spec"`
	// Status is fenceline-controller's memory of the policy and what it
	// found about the nodes it selects.
	// +optional
	Status FencePolicyStatus `json:"status,omitempty"`
}

// FencePolicyStatus is written by fenceline-controller: the storm guard's
// state by node-fencing, the coverage by fence-coverage.
type FencePolicyStatus struct {
	// StormGuard is the storm guard's rate bucket and storm state, kept
	// here so that a restarted or newly elected controller is never more
	// permissive than the one before it. Absent: no fence was ever admitted
	// under the policy (the state is written before an admission takes
	// effect).
	// +optional
	StormGuard *StormGuardStatus `json:"stormGuard,omitempty"`
	// Coverage is whether every node the policy selects can be fenced
	// now, as the fence-coverage controller last saw it: a node without
	// a FenceTarget, or whose fence devices do not answer or reject their
	// credentials, is found here before it dies, not when it does.
	// +optional
	Coverage *FenceCoverage `json:"coverage,omitempty"`
}

// FenceCoverage counts the nodes a policy selects and lists those that
// cannot be fenced now.
type FenceCoverage struct {
	// SelectedNodes is the number of nodes the policy selects (nodes
	// labelled fenceline.io/exclude-from-fencing are not counted).
	SelectedNodes int32 `json:"selectedNodes"`
	// UncoveredNodes is the number of selected nodes that cannot be
	// fenced now; Uncovered lists them, the first MaxUncoveredListed by
	// name.
	UncoveredNodes int32 `json:"uncoveredNodes"`
	// Uncovered are nodes that cannot be fenced now, and why.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=50
	Uncovered []UncoveredNode `json:"uncovered,omitempty"`
	// ObservedGeneration is the policy's generation this coverage was
	// computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// MaxUncoveredListed is how many uncovered nodes FenceCoverage lists.
const MaxUncoveredListed = 50

// UncoveredNode is a node a policy selects that cannot be fenced now.
type UncoveredNode struct {
	// Node is the node's name.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Reason is a CamelCase word: PolicyNotUsable, SeveralPolicies,
	// NoFenceTarget, NoEndpointForPolicy, NotProbed, or the reason of the
	// FenceTarget's Reachable condition (Unreachable,
	// CredentialsRejected, CredentialsMissing, TLSNotTrusted, ...).
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`
	// Message says what to do.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// StormGuardStatus is the storm guard's state as of UpdateTime. Its times
// are the clock of the controller that wrote them; a controller that
// restores them compares them only with one another, never with its own
// clock: it credits no refill and no cooldown for the time between the
// write and its restore.
type StormGuardStatus struct {
	// Tokens is the content of the rate bucket at BucketTime, rounded down
	// to a thousandth of a token.
	// +optional
	Tokens *resource.Quantity `json:"tokens,omitempty"`
	// BucketTime is when the bucket held Tokens.
	// +optional
	BucketTime *metav1.MicroTime `json:"bucketTime,omitempty"`
	// StormActive: the last admission decision saw more nodes unhealthy
	// than maxUnhealthy allows; StormStartTime is when that storm began.
	// +optional
	StormActive bool `json:"stormActive,omitempty"`
	// +optional
	StormStartTime *metav1.MicroTime `json:"stormStartTime,omitempty"`
	// LastStormEndTime is when the last storm ended; the cooldown runs
	// from it.
	// +optional
	LastStormEndTime *metav1.MicroTime `json:"lastStormEndTime,omitempty"`
	// UpdateTime is when this state was written.
	// +optional
	UpdateTime *metav1.MicroTime `json:"updateTime,omitempty"`
}

// FencePolicySpec is the when, the order and the limits of fencing.
type FencePolicySpec struct {
	// NodeSelector selects the nodes of this policy; empty selects all.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Paused stops automatic fencing under this policy, for maintenance
	// and upgrades: no automatic FencingRequest is created, and one not
	// yet admitted waits (unless an operator approved it). A fence already
	// admitted goes on, manual requests are carried out, and detection
	// still reports what it sees. Unpausing resumes where it stopped.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Detection is when a node is to be fenced.
	// +optional
	// +default={}
	Detection FenceDetection `json:"detection,omitempty"`

	// The order rule compares neighbours over the positions MaxItems
	// allows, rather than self.map(l, l.index).isSorted(): Kubernetes
	// 1.29's CEL cost estimator does not carry the list's bound through
	// map() and refuses that rule as over budget, so the CRD could not be
	// installed there.

	// Levels are tried in ascending index; all classes of a level must
	// succeed for the level to succeed (Pacemaker fencing topology).
	// +required
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="[1, 2, 3, 4, 5, 6, 7].all(i, i >= self.size() || self[i - 1].index < self[i].index)",message="levels must be in ascending index order"
	Levels []FenceLevel `json:"levels"`

	// StorageFence says whether a storage fence must succeed as well.
	// +optional
	// +default="Required"
	StorageFence StorageFenceMode `json:"storageFence,omitempty"`

	// StorageFenceMethods are storage fences Fenceline makes itself once
	// the power fence is proven and before the out-of-service taint (today
	// a csi-addons NetworkFence, which ceph-csi serves). With storageFence
	// Required the taint waits until every one succeeded; with BestEffort
	// their outcome is reported only. They are lifted, and their objects
	// deleted, when the node is recovered, before its taints go.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	StorageFenceMethods []StorageFenceMethod `json:"storageFenceMethods,omitempty"`

	// StormGuard limits how much is fenced at once.
	// +optional
	// +default={}
	StormGuard StormGuard `json:"stormGuard,omitempty"`

	// Recovery is how a fenced node comes back.
	// +optional
	// +default={}
	Recovery FenceRecovery `json:"recovery,omitempty"`
}

// ApprovalMode says whether a triaged node is fenced without a human.
// +kubebuilder:validation:Enum=Automatic;Manual
type ApprovalMode string

const (
	// ApprovalAutomatic fences as soon as the storm guard allows.
	ApprovalAutomatic ApprovalMode = "Automatic"
	// ApprovalManual stops at phase Triaged until spec.approved is true.
	ApprovalManual ApprovalMode = "Manual"
)

// FenceDetection is when a node is to be fenced.
type FenceDetection struct {
	// LeaseStaleAfter is how old the node's Lease renewTime may get
	// before the node is triaged. A value below two kubelet renew intervals
	// (two fifths of the Lease's leaseDurationSeconds, 20s by default) is
	// raised to that: one late renewal must never fence a node.
	// +optional
	// +default="20s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('1h')",message="leaseStaleAfter must be between 5s and 1h"
	LeaseStaleAfter *metav1.Duration `json:"leaseStaleAfter,omitempty"`

	// UnhealthyConditions are further triggers, OR-ed: a node condition
	// with that status for at least that duration.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	UnhealthyConditions []UnhealthyCondition `json:"unhealthyConditions,omitempty"`

	// Approval is Automatic or Manual.
	// +optional
	// +default="Automatic"
	Approval ApprovalMode `json:"approval,omitempty"`

	// PowerCheck is whether a node that misses a Lease renewal has its
	// fence devices read at once (read-only, through the fence agent):
	// OnMissedRenewal (the default) makes a node whose every device reads
	// Off for that missed renewal a candidate without waiting for
	// leaseStaleAfter (reason PowerOffObserved); a node that reads On, or a
	// device that does not answer, takes the normal path. Never turns the
	// reads off.
	// +optional
	// +default="OnMissedRenewal"
	PowerCheck PowerCheckMode `json:"powerCheck,omitempty"`
}

// PowerCheckMode is when the fence devices of a silent node are read.
// +kubebuilder:validation:Enum=OnMissedRenewal;Never
type PowerCheckMode string

const (
	// PowerCheckOnMissedRenewal reads them when the node misses its first
	// Lease renewal.
	PowerCheckOnMissedRenewal PowerCheckMode = "OnMissedRenewal"
	// PowerCheckNever never reads them for detection.
	PowerCheckNever PowerCheckMode = "Never"
)

// UnhealthyCondition is a node condition that triggers fencing.
type UnhealthyCondition struct {
	// Type is the node condition type, e.g. Ready.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`
	// Status is the condition status that counts as unhealthy.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`
	// Duration is how long the condition must hold.
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="duration must not be negative"
	Duration metav1.Duration `json:"duration"`
}

// FenceLevel is one rung of the fencing topology.
type FenceLevel struct {
	// Index orders the levels, from 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Index int32 `json:"index"`
	// FenceClassNames must all succeed for the level to succeed.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=253
	FenceClassNames []string `json:"fenceClassNames"`
	// Timeout bounds the whole level, retries included.
	// +optional
	// +default="20s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('30m')",message="level timeout must be between 1s and 30m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// StorageFenceMode says whether the storage fence is part of the fence.
// +kubebuilder:validation:Enum=Required;BestEffort
type StorageFenceMode string

const (
	// StorageFenceRequired: Complete needs every driver's storage fence.
	StorageFenceRequired StorageFenceMode = "Required"
	// StorageFenceBestEffort: storage fence failures are reported only.
	StorageFenceBestEffort StorageFenceMode = "BestEffort"
)

// StorageFenceMethodName names a storage fence method.
// +kubebuilder:validation:Enum=NetworkFence
type StorageFenceMethodName string

// StorageFenceNetworkFence fences the node's addresses through a csi-addons
// NetworkFence (csiaddons.openshift.io/v1alpha1).
const StorageFenceNetworkFence StorageFenceMethodName = "NetworkFence"

// StorageFenceMethod is one storage fence of a policy.
// +kubebuilder:validation:XValidation:rule="self.method != 'NetworkFence' || has(self.networkFence)",message="method NetworkFence needs networkFence"
type StorageFenceMethod struct {
	// Method is the kind of storage fence.
	// +required
	Method StorageFenceMethodName `json:"method"`
	// NetworkFence configures method NetworkFence.
	// +optional
	NetworkFence *NetworkFenceMethod `json:"networkFence,omitempty"`
}

// NetworkFenceMethod is a csi-addons NetworkFence made for a fenced node:
// one NetworkFence object through the named NetworkFenceClass, over the
// node's addresses of the listed types, each as a single-address CIDR.
type NetworkFenceMethod struct {
	// NetworkFenceClassName is the csi-addons NetworkFenceClass; its
	// provisioner is the CSI driver that fences.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NetworkFenceClassName string `json:"networkFenceClassName"`
	// AddressTypes are the node address types fenced; InternalIP when
	// empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=InternalIP;ExternalIP
	AddressTypes []corev1.NodeAddressType `json:"addressTypes,omitempty"`
}

// StormGuard limits fencing when many nodes fail at once, as the node
// lifecycle controller limits evictions and NHC limits remediations.
type StormGuard struct {
	// MaxConcurrentFencing is how many nodes may be fencing at once.
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxConcurrentFencing int32 `json:"maxConcurrentFencing,omitempty"`
	// MaxUnhealthy stops fencing when more selected nodes than this
	// (a count or a percentage, rounded down) are unhealthy. The default,
	// half of them, lets a cluster of two or three nodes fence one.
	// +optional
	// +default="50%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="maxUnhealthy must be a non-negative count or a percentage from 0% to 100%"
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// Rate is a token bucket on new fences.
	// +optional
	// +default={}
	Rate FenceRate `json:"rate,omitempty"`
	// ZoneLabel is the node label that names a node's zone.
	// +optional
	// +default="topology.kubernetes.io/zone"
	// +kubebuilder:validation:MaxLength=316
	ZoneLabel string `json:"zoneLabel,omitempty"`
	// UnhealthyZoneThreshold is the unhealthy fraction (0 to 1) at which a
	// zone is partially disrupted.
	// +optional
	// +default="0.55"
	UnhealthyZoneThreshold *resource.Quantity `json:"unhealthyZoneThreshold,omitempty"`
	// PartialDisruptionRate is the fences per second in a partially
	// disrupted zone larger than LargeClusterSize nodes; in a smaller zone
	// it is 0, as in the node lifecycle controller.
	// +optional
	// +default="0.01"
	PartialDisruptionRate *resource.Quantity `json:"partialDisruptionRate,omitempty"`
	// LargeClusterSize is the zone size above which a partially disrupted
	// zone is still fenced, at PartialDisruptionRate. Like the node
	// lifecycle controller's --large-cluster-size-threshold, it is compared
	// with the zone's node count.
	// +optional
	// +default=50
	// +kubebuilder:validation:Minimum=1
	LargeClusterSize int32 `json:"largeClusterSize,omitempty"`
	// FullDisruption is what to do when every zone is disrupted.
	// +optional
	// +default="Stop"
	// +kubebuilder:validation:Enum=Stop
	FullDisruption string `json:"fullDisruption,omitempty"`
	// Cooldown is how long fencing stays paused after a storm ends (more
	// nodes unhealthy than MaxUnhealthy allows), as NodeHealthCheck's
	// stormCooldownDuration: counted from the moment the limit holds again.
	// +optional
	// +default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="cooldown must be between 0s and 1h"
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`
	// MaxAttempts is how many times a request runs through all levels
	// before it is Failed.
	// +optional
	// +default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
}

// FenceRate is a token bucket.
type FenceRate struct {
	// QPS is the sustained rate of new fences per second.
	// +optional
	// +default="0.1"
	QPS *resource.Quantity `json:"qps,omitempty"`
	// Burst is the bucket size.
	// +optional
	// +default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Burst int32 `json:"burst,omitempty"`
}

// FenceRecovery is how a fenced node comes back.
type FenceRecovery struct {
	// OutOfServiceTaint says whether Fenceline adds the
	// node.kubernetes.io/out-of-service taint once the fence is Complete.
	// +optional
	// +default="Apply"
	// +kubebuilder:validation:Enum=Apply;None
	OutOfServiceTaint string `json:"outOfServiceTaint,omitempty"`
	// Unfence says when the node is unfenced.
	// +optional
	// +default="OnNewBootID"
	// +kubebuilder:validation:Enum=OnNewBootID;Manual
	Unfence string `json:"unfence,omitempty"`
	// HealthyDelay is how long the node must be Ready before it is
	// unfenced.
	// +optional
	// +default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="healthyDelay must be between 0s and 1h"
	HealthyDelay *metav1.Duration `json:"healthyDelay,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// FencePolicyList is a list of FencePolicies.
type FencePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FencePolicy `json:"items"`
}
