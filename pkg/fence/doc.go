// Package fence implements the Fenceline CSI fence extension for both sides of
// a CSI connection: storage drivers (SPs) and container orchestrators (COs).
//
// The extension adds three boolean fields to official CSI requests and one
// small gRPC service; the contract is defined in
// api/fence/v1/fenceline_fence.proto, the generated code lives in package
// fencev1, and docs/fence-extension.md explains it. The fields are:
//
//   - fence (field 4) on csi.ControllerUnpublishVolumeRequest: the driver must
//     cut the node off from the volume at the storage before returning;
//   - force (field 3) on csi.NodeUnpublishVolumeRequest and
//     csi.NodeUnstageVolumeRequest: clean up even if unflushed data is lost.
//
// The official Go package (github.com/container-storage-interface/spec/lib/go/csi)
// does not know these fields, so the protobuf runtime keeps them among a
// request's unknown fields. This package reads and writes them there, which
// lets drivers and COs keep using the official types and lets drivers that
// know nothing of the extension ignore the fields safely.
//
// Support is discovered through the FenceCapabilities service rather than the
// official capability enums, because csi-sanity rejects capability values it
// does not know and the numbers once proposed for these capabilities now mean
// MODIFY_VOLUME and GET_VOLUME_HEALTH.
//
// Driver side:
//
//	fence.RegisterCapabilitiesServer(srv, fence.Capabilities{UnpublishFence: true})
//	...
//	if fence.IsFenced(req) { /* revoke the node's access before returning */ }
//
// CO side:
//
//	caps, err := fence.Discover(ctx, conn)
//	...
//	if caps.UnpublishFence { fence.SetFence(req, true) }
//
// Listing and lifting fences (LIST_FENCES, LIFT_FENCE) are optional calls
// of the same service. A driver implements FenceStore and registers it with
// RegisterFenceServer, which validates requests and pages the answers
// (ValidateListFencesRequest, ValidateLiftFenceRequest and PageFences serve
// a driver that implements the service itself); a CO calls ListFences and
// LiftFence, which never call what the driver did not advertise:
//
//	fence.RegisterFenceServer(srv, fence.Capabilities{UnpublishFence: true, ListFences: true, LiftFence: true}, store)
//	...
//	fences, err := fence.ListFences(ctx, conn, caps, &fencev1.ListFencesRequest{NodeId: node})
//	lifted, err := fence.LiftFence(ctx, conn, caps, &fencev1.LiftFenceRequest{NodeId: node, Reason: "rebooted"})
//
// A CO lifts a fence only once the node is known to hold nothing of the
// volumes any more (it rebooted since the fence, or an operator says so);
// the driver does not judge that, and lifting gives the node no access back.
//
// Before advertising a capability, run the conformance suite in package
// sanity (or its command, cmd/fence-sanity; see docs/fence-sanity.md).
//
// This package is a Go module of its own, fenceline.io/fenceline/pkg/fence,
// that needs only grpc, protobuf and the CSI spec at old minimum versions, so
// a driver pinned to an older Kubernetes and Go can import it without any of
// its pins moving.
package fence
