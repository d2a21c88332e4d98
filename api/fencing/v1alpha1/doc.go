// Package v1alpha1 holds the node-fencing API of Fenceline, group
// fenceline.io, version v1alpha1. Every kind is cluster-scoped, because the
// nodes it is about are:
//
//   - FencingRequest: one request to fence one Node, Job-like: its status
//     records the progress, every attempt and the final result;
//   - FenceClass: how to fence (Redfish, IPMI or an exec fence agent),
//     with timeouts, retries and the read-back that proves a power-off;
//   - FenceTarget: a node's fencing endpoints (name = node name), and the
//     result of a periodic read-only probe of them;
//   - FencePolicy: when to fence (detection), in which order (levels), how
//     much at once (storm guard) and how a node comes back (recovery).
//
// Validation that needs only the object itself is declared with CEL rules
// and enforced by the API server. Rules across objects (a policy's level
// naming a missing class, a policy whose only level shares power with the
// node, at most one open request per node) cannot be CEL rules; the
// controller enforces them and reports them in status and Events.
//
// +k8s:deepcopy-gen=package
// +groupName=fenceline.io
// +groupGoName=Fencing
package v1alpha1
