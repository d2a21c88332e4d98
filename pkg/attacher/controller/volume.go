package controller

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// volumeCapability translates a PV into the CSI volume capability that
// ControllerPublishVolume needs: access mode, block or mount with fsType
// (falling back to --default-fstype) and mount options.
func volumeCapability(pv *v1.PersistentVolume, defaultFSType string, singleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(pv.Spec.AccessModes, singleNodeMultiWriter)
	if err != nil {
		return nil, fmt.Errorf("PV %s access modes: %w", pv.Name, err)
	}
	capability := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		capability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		return capability, nil
	}
	fsType := defaultFSType
	if pv.Spec.CSI != nil && pv.Spec.CSI.FSType != "" {
		fsType = pv.Spec.CSI.FSType
	}
	capability.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
		FsType:     fsType,
		MountFlags: pv.Spec.MountOptions,
	}}
	return capability, nil
}

// publishSecrets reads the PV's controllerPublishSecretRef, if any. The same
// secrets are passed to ControllerUnpublishVolume, as upstream does.
func (c *Controller) publishSecrets(ctx context.Context, pv *v1.PersistentVolume) (map[string]string, error) {
	if pv == nil || pv.Spec.CSI == nil || pv.Spec.CSI.ControllerPublishSecretRef == nil {
		return nil, nil
	}
	ref := pv.Spec.CSI.ControllerPublishSecretRef
	secret, err := c.client(ctx).CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get controllerPublishSecretRef %s/%s of PV %s: %w", ref.Namespace, ref.Name, pv.Name, err)
	}
	out := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		out[k] = string(v)
	}
	return out, nil
}
