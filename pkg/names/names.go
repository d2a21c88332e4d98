// Package names holds the well-known names that Fenceline reads and writes on
// Kubernetes objects: taint keys, annotations, condition types, finalizers and
// lease names. Every component takes them from here so that the attacher, the
// companion controller, the deploy manifests and the tests always agree.
//
// Names owned by Fenceline live under the fenceline.io domain; names owned by
// Kubernetes or by the upstream external-attacher are reproduced exactly, so
// that Fenceline stays a drop-in replacement.
package names

import "strings"

const (
	// Domain is the DNS domain that owns every Fenceline-specific name.
	Domain = "fenceline.io"

	// SafeDetachAnnotation, set to "true" on a CSIDriver object, states that
	// the driver's ControllerUnpublishVolume with fence=true makes a detach
	// safe even from a node that may still be running.
	SafeDetachAnnotation = Domain + "/safe-detach"

	// QuarantineTaint is the taint key the companion controller puts on a
	// NotReady node (effect NoSchedule) before it force-deletes pods of
	// safe-detach drivers on it.
	QuarantineTaint = Domain + "/quarantine"

	// ForceEvictionTaint is the taint key (effect NoExecute) by which an
	// operator asks for every pod on a NotReady node to be force-deleted.
	ForceEvictionTaint = Domain + "/force-eviction"

	// OutOfServiceTaint is the KEP-2268 taint key. Only the key matters: any
	// value and any effect count, as in upstream's controllers.
	OutOfServiceTaint = "node.kubernetes.io/out-of-service"

	// OutOfServiceAppliedByAnnotation is how another fencer says on a Node
	// that it applied the out-of-service taint (OpenShift's Pacemaker-based
	// fencing writes "pacemaker"). Not Fenceline's: read, never written.
	// Fenceline never removes a taint another party applied.
	OutOfServiceAppliedByAnnotation = "node.kubernetes.io/out-of-service-applied-by"

	// FencingCompleteCondition is the Node condition type that a node-fencing
	// controller sets to True once the node is known to be powered off or cut
	// off from storage.
	FencingCompleteCondition = "FencingComplete"

	// FencingTriagedCondition is the Node condition type (node fencing
	// proposal) that is True once the node has been seen in a state that may
	// need fencing. It never implies that the node will be fenced.
	FencingTriagedCondition = "FencingTriaged"

	// FencingRequiredCondition is the Node condition type (node fencing
	// proposal) that is True once policy has decided that the node must be
	// fenced. It is set before FencingCompleteCondition and cleared after it.
	FencingRequiredCondition = "FencingRequired"

	// LyingFenceCondition is the Node condition type that node fencing sets
	// to True when a node recorded fenced (power read back Off) is observed
	// alive with the boot ID it had when fenced: its fence device lied. It
	// changes nothing of the fence (the storage fence stays, nothing is
	// unfenced); it is False once the node reboots or is no longer fenced.
	LyingFenceCondition = Domain + "/LyingFence"

	// FencingRequiredTaint is the taint key put on a node while
	// FencingRequiredCondition is True, with effect
	// FencingRequiredTaintEffect, so that nothing new lands on a node about
	// to be powered off.
	FencingRequiredTaint = Domain + "/fencing-required"

	// FencingRequiredTaintEffect is the effect of FencingRequiredTaint.
	FencingRequiredTaintEffect = "NoSchedule"

	// FencingTriagedTaint is the taint key put on a node while
	// FencingTriagedCondition is True, with effect FencingTriagedTaintEffect:
	// a soft hint to schedule elsewhere while the node may be fenced.
	FencingTriagedTaint = Domain + "/fencing-triaged"

	// FencingTriagedTaintEffect is the effect of FencingTriagedTaint.
	FencingTriagedTaintEffect = "PreferNoSchedule"

	// OutOfServiceOwnerAnnotation records, on a Node, the UID of the
	// FencingRequest for which Fenceline added the OutOfServiceTaint.
	// Fenceline removes only an out-of-service taint whose owner annotation
	// it wrote: the actor that taints is the one that untaints.
	OutOfServiceOwnerAnnotation = Domain + "/out-of-service-owner"

	// UnfenceAnnotation is an operator's ask that node-fencing cancel or
	// unfence, written by kubectl fenceline unfence: on the node's
	// FencingRequest (its open one, or the Failed one whose marks are left),
	// or on the Node when no request of it is left. Its value is who asks,
	// "user:<name>". Only node-fencing acts on it, when its rule allows
	// (docs/fencing.md); the ask changes nothing by itself.
	UnfenceAnnotation = Domain + "/unfence"

	// UnfenceVerifiedAnnotation, next to UnfenceAnnotation, is what the
	// operator verified of the machine since its fence began: "Off" (it was
	// powered off) or "Rebooted". node-fencing takes it as the proof a new
	// boot ID would give only where it has no boot ID to compare, never
	// against a boot ID that shows the machine did not stop.
	UnfenceVerifiedAnnotation = Domain + "/unfence-verified"

	// OverrideExclusionAnnotation on a manual FencingRequest lets it fence a
	// node labelled fenceline.io/exclude-from-fencing; its value is who
	// decided, "user:<name>". Without it node-fencing holds such a request.
	OverrideExclusionAnnotation = Domain + "/override-exclusion"

	// PowerCheckAnnotation on a FenceTarget asks the fence agent to read
	// the node's fence devices now (read-only); its value is a token the
	// answer in status.powerCheck repeats. fenceline-controller writes it
	// when the node misses a Lease renewal.
	PowerCheckAnnotation = Domain + "/power-check"

	// FencingRequestNodeLabel is on every FencingRequest the controller
	// creates; its value is the node's name, so that a node's requests are
	// found by a label selector (spec.nodeName is not selectable).
	FencingRequestNodeLabel = Domain + "/node"

	// APIGroup is the API group of Fenceline's fencing kinds
	// (FencingRequest, FenceClass, FenceTarget, FencePolicy).
	APIGroup = Domain

	// APIVersion is the served version of APIGroup.
	APIVersion = "v1alpha1"

	// NodeIDAnnotation is the upstream external-attacher's VolumeAttachment
	// annotation that records the CSI node ID used at attach time, so that a
	// detach still works after the node's CSINode is gone.
	NodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"

	// ControllerManagedAttachAnnotation marks a Node whose volumes are
	// attached and detached by kube-controller-manager.
	ControllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

	// FenceRecordAnnotation holds, on a VolumeAttachment, the attacher's
	// record that its detach was decided fenced: the reason and the CSI node
	// ID it fences, as JSON. It is written before the first fenced
	// ControllerUnpublishVolume and never removed, so that no retry, restart
	// or leader change can turn that detach into a plain one.
	FenceRecordAnnotation = Domain + "/fence"

	// FenceIntentAnnotation holds, on a VolumeAttachment, the fence intent
	// of the fenceline-controller controller that made its detach
	// inevitable (a force deletion, a release of volumesInUse, an
	// out-of-service taint): the same JSON record as FenceRecordAnnotation,
	// written before that write. fenceline-attacher reads it as a reason to
	// fence whatever the Node looks like when it gets to the detach. Never
	// removed by Fenceline; nobody else may remove it either.
	FenceIntentAnnotation = Domain + "/fence-intent"

	// BootIDAnnotation is where the companion controller records the node's
	// boot ID when it first sees the out-of-service taint, so that it can
	// later prove a power cycle before removing the taint.
	BootIDAnnotation = Domain + "/boot-id-at-out-of-service"

	// DriverLabel is on every heartbeat Lease a fenceline-attacher writes;
	// its value is the sanitized driver name (SanitizeDriverName), because
	// label values cannot hold every character of a driver name. Readers
	// select heartbeats by the label's presence and identify the driver by
	// HeartbeatDriverAnnotation, which is exact.
	DriverLabel = Domain + "/driver"

	// HeartbeatDriverAnnotation records, on a heartbeat Lease, the exact CSI
	// driver name the attacher serves. Two drivers may sanitize to the same
	// label value or Lease name; this annotation tells them apart.
	HeartbeatDriverAnnotation = Domain + "/driver-name"

	// HeartbeatUnpublishFenceAnnotation records, on a heartbeat Lease,
	// whether the driver advertised UNPUBLISH_FENCE when the attacher
	// discovered its capabilities: "true" or "false".
	HeartbeatUnpublishFenceAnnotation = Domain + "/unpublish-fence"

	// HeartbeatVersionAnnotation records, on a heartbeat Lease, the
	// fenceline-attacher version that writes it.
	HeartbeatVersionAnnotation = Domain + "/attacher-version"

	// LeaderVersionAnnotation records, on the leader-election Lease of
	// fenceline-controller and of fenceline-fence-agent, the version of
	// the replica that holds it (written with every renewal), for kubectl
	// fenceline to compare with its own.
	LeaderVersionAnnotation = Domain + "/version"
)

// SanitizeDriverName turns a CSI driver name into the form the upstream
// external-attacher uses in finalizers and lease names: every character
// outside [a-zA-Z0-9-] becomes '-', and a trailing '-' gets an 'X' appended.
func SanitizeDriverName(driver string) string {
	var b strings.Builder
	for _, r := range driver {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	s := b.String()
	if strings.HasSuffix(s, "-") {
		s += "X"
	}
	return s
}

// AttacherFinalizer returns the finalizer the external-attacher (upstream
// and Fenceline alike) puts on VolumeAttachments and PersistentVolumes of
// the given driver.
func AttacherFinalizer(driver string) string {
	return "external-attacher/" + SanitizeDriverName(driver)
}

// AttacherLeaseName returns the leader-election lease name shared with the
// upstream external-attacher, so that the two never lead at the same time.
func AttacherLeaseName(driver string) string {
	return "external-attacher-leader-" + SanitizeDriverName(driver)
}

// AttacherHeartbeatLeaseName returns the name of the heartbeat Lease that the
// leading fenceline-attacher of the driver renews. It is not the
// leader-election Lease (AttacherLeaseName): that one is shared with the
// upstream external-attacher and so proves nothing about Fenceline running.
// Object names must be lower case, so the sanitized name is lowered.
func AttacherHeartbeatLeaseName(driver string) string {
	return "fenceline-attacher-" + strings.ToLower(SanitizeDriverName(driver))
}
