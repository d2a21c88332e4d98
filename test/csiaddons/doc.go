// Package csiaddons is a stand-in for the csi-addons controller's
// NetworkFence handling, for the test worlds: the NetworkFence and
// NetworkFenceClass CRDs (csiaddons.openshift.io/v1alpha1, crds/), Go types
// for both, InstallCRDs, and a controller written with client-go alone (a
// dynamic informer and a work queue) that turns NetworkFences into
// csi-addons FenceClusterNetwork and UnfenceClusterNetwork calls on a
// driver's csi-addons socket, such as the mock driver's
// --csi-addons-endpoint.
//
// What it follows of the real controller (kubernetes-csi-addons,
// internal/controller/csiaddons/networkfence_controller.go):
//
//   - It handles a NetworkFence when it is created and when its generation
//     changes (a spec change, or the deletion of an object with
//     finalizers); its own status updates start nothing.
//   - It validates the spec first: with networkFenceClassName, cidrs must
//     be set; without, driver and cidrs must be. An invalid spec gets
//     status.result Failed and status.message "Failed to validate
//     Networkfence parameters: ..." and is not retried.
//   - It resolves the driver: networkFenceClassName's NetworkFenceClass
//     gives the driver (spec.provisioner), its parameters and the Secret
//     (the reserved parameters SecretNameParameter and
//     SecretNamespaceParameter, which are not passed on; the class's
//     parameters are laid over the NetworkFence's). Without a class the
//     deprecated spec.driver, spec.secret and spec.parameters are used. A
//     class that cannot be read, or a driver without a socket or without
//     the NETWORK_FENCE capability, is retried with back-off and the
//     status left alone.
//   - It adds the finalizer csiaddons.openshift.io/network-fence before
//     calling the driver, writing the object back as its typed Go object
//     would: spec.driver ("") and spec.secret ({}) are filled in when
//     absent, so for a NetworkFence made without them (as Fenceline makes
//     them) the update bumps the generation and the object is handled, and
//     the driver called, a second time. The real controller was seen doing
//     exactly that.
//   - It reads the Secret's data into the call's secrets; a Secret that
//     cannot be read (or is not named) fails the call with
//     InvalidArgument, as the csi-addons sidecar does.
//   - It calls FenceClusterNetwork for fenceState Fenced and
//     UnfenceClusterNetwork for Unfenced, with a time limit
//     (Options.Timeout, 3 minutes by default). On success it writes
//     status.result Succeeded and status.message "fencing operation
//     successful" or "unfencing operation successful"; on an error it
//     writes result Failed with the error's text and retries with
//     exponential back-off until a call succeeds. The conditions are left
//     alone.
//   - On deletion it only removes its finalizer: it does not unfence. To
//     lift a fence, set fenceState to Unfenced and wait for Succeeded
//     before deleting the NetworkFence.
//
// What it leaves out:
//
//   - The csi-addons sidecar hop: the controller calls the driver's
//     csi-addons socket directly (Options.Drivers maps a driver name to
//     it) and reads the Secret itself, where the real controller sends a
//     NetworkFenceRequest to the sidecar, which reads the Secret and calls
//     the driver. An RPC error's text is the driver's own either way: the
//     sidecar passes the driver's gRPC status through.
//   - The lookup of the CSIAddonsNode that holds the driver's leader lease:
//     there is exactly one socket per driver.
//   - The NetworkFenceClass side: the real controller puts a finalizer on
//     each class, names the class in an annotation of every CSIAddonsNode
//     whose driver announces GET_CLIENTS_TO_FENCE, and its CSIAddonsNode
//     controller then calls GetFenceClients and writes the clients into the
//     CSIAddonsNode's status; the class's own status stays empty. Here
//     NetworkFenceClasses are only read.
//   - Defaulting and the CEL rules are the API server's: against a fake
//     client an empty fenceState is taken as Fenced (the CRD's default)
//     and an unknown one fails validation.
package csiaddons
