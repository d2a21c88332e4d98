package quarantine

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// pvVolumeIndex indexes CSI PersistentVolumes by the name their volume has
// in node status (nodeutil.CSIUniqueVolumeName).
const pvVolumeIndex = "fenceline.io/csi-unique-volume-name"

func pvUniqueName(obj any) ([]string, error) {
	pv, ok := obj.(*v1.PersistentVolume)
	if !ok || pv.Spec.CSI == nil {
		return nil, nil
	}
	return []string{string(nodeutil.CSIUniqueVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle))}, nil
}

// keepListed says why a volumesInUse entry must stay listed whatever the
// attacher evidence, or "": its PersistentVolume is ReadWriteMany, or is
// not in the cache, so that it cannot be shown not to be.
func (c *Controller) keepListed(name v1.UniqueVolumeName) string {
	objs, err := c.pvsByVolume.ByIndex(pvVolumeIndex, string(name))
	if err != nil || len(objs) == 0 {
		return fmt.Sprintf("volume %s: no PersistentVolume found, so it may be ReadWriteMany", name)
	}
	for _, o := range objs {
		if pv, ok := o.(*v1.PersistentVolume); ok && slices.Contains(pv.Spec.AccessModes, v1.ReadWriteMany) {
			return fmt.Sprintf("volume %s (PersistentVolume %s) is ReadWriteMany", name, pv.Name)
		}
	}
	return ""
}
