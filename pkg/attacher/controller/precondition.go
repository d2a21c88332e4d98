package controller

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// attachablePV states when a PersistentVolume may be attached by this
// driver: it is not being deleted (upstream refuses such a PV too, before
// its finalizer is added), it is a CSI volume, and it is this driver's. Every
// refusal is permanent: retrying cannot change it. It is checked on the
// cached PV before anything is written and again on the PV the API returns
// when the attacher adds its finalizer.
func attachablePV(pv *v1.PersistentVolume, driver string) error {
	switch {
	case pv.DeletionTimestamp != nil:
		return permanent("PersistentVolume %q is marked for deletion", pv.Name)
	case pv.Spec.CSI == nil:
		return permanent("PV %s is not a CSI volume; CSI migration of in-tree volumes is not supported by fenceline-attacher", pv.Name)
	case pv.Spec.CSI.Driver != driver:
		return permanent("PV %s belongs to driver %q, not %q", pv.Name, pv.Spec.CSI.Driver, driver)
	}
	return nil
}

// publishReadOnly is the readonly field of ControllerPublishVolume: the PV's
// readOnly, but only for a driver that advertises PUBLISH_READONLY. The CSI
// spec: "CO MUST set this field to false if SP does not have the
// PUBLISH_READONLY controller capability" (upstream clears it too).
func publishReadOnly(pv *v1.PersistentVolume, driverSupportsReadOnly bool) bool {
	return driverSupportsReadOnly && pv.Spec.CSI != nil && pv.Spec.CSI.ReadOnly
}

// attachNodeID is the CSI node ID an attach publishes to: the driver's entry
// in the node's CSINode, and nothing else. The VolumeAttachment's node-id
// annotation only records what was published; it is a fallback for detach
// (fencing.DetachNodeID) and the reconciler, never a target for a new
// publish, as upstream. csiNode is nil when the node has none.
func attachNodeID(csiNode *storagev1.CSINode, nodeName, driver string) (string, error) {
	if csiNode == nil {
		return "", fmt.Errorf("node %q has no CSINode", nodeName)
	}
	for _, d := range csiNode.Spec.Drivers {
		if d.Name == driver && d.NodeID != "" {
			return d.NodeID, nil
		}
	}
	return "", fmt.Errorf("CSINode %s does not contain driver %s", nodeName, driver)
}
