// Package podvolumes classifies a pod's volumes from the informer caches:
// which are CSI PersistentVolumes, of which driver, whether several nodes
// may write them, and which cannot be resolved yet. quarantine decides
// safe detach from it; taint-eviction tells stateful pods from stateless
// ones with it.
package podvolumes

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
)

// Kind classifies a pod volume.
type Kind int

const (
	// KindHarmless volumes hold nothing that outlives the pod on shared
	// storage: configMap, secret, downwardAPI, projected, emptyDir. Their
	// content on the dead node is lost either way, and the replacement pod
	// gets fresh copies, so they never block quarantine.
	KindHarmless Kind = iota
	// KindCSI is a PersistentVolume served by a CSI driver (through a PVC
	// or a generic ephemeral volume).
	KindCSI
	// KindInlineCSI is a CSI ephemeral inline volume: it is not attached
	// through a VolumeAttachment, so no fence protects it.
	KindInlineCSI
	// KindNodeLocal is data bound to the node (hostPath, local PV): the
	// pod cannot move without losing it.
	KindNodeLocal
	// KindOther is any other volume type (in-tree, iSCSI, NFS, ...):
	// Fenceline cannot fence it.
	KindOther
	// KindUnresolved is a PVC or PV that cannot be found or is not bound
	// yet; the decision waits for it.
	KindUnresolved
)

// Volume is what the decision needs to know about one pod volume.
type Volume struct {
	// Name is the volume's name in the pod spec.
	Name string
	Kind Kind
	// Driver and Handle are set for KindCSI.
	Driver string
	Handle string
	// PV is the PersistentVolume's name, for PVC-backed volumes.
	PV string
	// SafeDetach says the driver's CSIDriver has the safe-detach annotation.
	SafeDetach bool
	// RWX says the PV allows ReadWriteMany.
	RWX bool
	// ROXOnly says the PV allows ReadOnlyMany and no write mode: no node
	// can write it, so it never needs a fence.
	ROXOnly bool
	// Detail explains KindUnresolved / KindOther.
	Detail string
}

// UniqueName returns the name kubelet and the attach/detach controller use
// for a CSI volume in node status.
func (v Volume) UniqueName() v1.UniqueVolumeName {
	return nodeutil.CSIUniqueVolumeName(v.Driver, v.Handle)
}

// CSIVolumes returns the names in node status and the PersistentVolumes of
// the CSI volumes among vols: what a fence intent covers before their
// detach is made inevitable.
func CSIVolumes(vols []Volume) (names []v1.UniqueVolumeName, pvs []string) {
	for _, v := range vols {
		if v.Kind != KindCSI {
			continue
		}
		names = append(names, v.UniqueName())
		if v.PV != "" {
			pvs = append(pvs, v.PV)
		}
	}
	return names, pvs
}

// Resolver classifies pod volumes from the informer caches.
type Resolver struct {
	pvcs    corelisters.PersistentVolumeClaimLister
	pvs     corelisters.PersistentVolumeLister
	drivers storagelisters.CSIDriverLister
}

// NewResolver reads PVCs, PVs and CSIDrivers through the given listers.
func NewResolver(pvcs corelisters.PersistentVolumeClaimLister, pvs corelisters.PersistentVolumeLister, drivers storagelisters.CSIDriverLister) *Resolver {
	return &Resolver{pvcs: pvcs, pvs: pvs, drivers: drivers}
}

// SafeDetach reports whether the driver's CSIDriver opted into safe detach,
// by the same rule the attacher fences by: quarantine may only delete pods
// whose volumes the attacher will fence.
func (r *Resolver) SafeDetach(driver string) (bool, error) {
	d, err := r.drivers.Get(driver)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("looking up CSIDriver %q: %w", driver, err)
	}
	return cutoff.SafeDetachEnabled(d), nil
}

// PodVolumes classifies every volume of the pod. An error means a cache
// lookup failed; a claim or PV that does not exist (yet) is KindUnresolved.
func (r *Resolver) PodVolumes(pod *v1.Pod) ([]Volume, error) {
	out := make([]Volume, 0, len(pod.Spec.Volumes))
	for _, pv := range pod.Spec.Volumes {
		v := Volume{Name: pv.Name}
		src := pv.VolumeSource
		switch {
		case src.ConfigMap != nil, src.Secret != nil, src.DownwardAPI != nil, src.Projected != nil, src.EmptyDir != nil:
			v.Kind = KindHarmless
		case src.HostPath != nil:
			v.Kind = KindNodeLocal
			v.Detail = "hostPath"
		case src.CSI != nil:
			v.Kind = KindInlineCSI
			v.Driver = src.CSI.Driver
		case src.PersistentVolumeClaim != nil:
			if err := r.fromClaim(pod.Namespace, src.PersistentVolumeClaim.ClaimName, &v); err != nil {
				return nil, err
			}
		case src.Ephemeral != nil:
			// Generic ephemeral volumes are PVCs named <pod>-<volume>.
			if err := r.fromClaim(pod.Namespace, pod.Name+"-"+pv.Name, &v); err != nil {
				return nil, err
			}
		default:
			v.Kind = KindOther
			v.Detail = "volume type Fenceline cannot fence"
		}
		out = append(out, v)
	}
	return out, nil
}

func (r *Resolver) fromClaim(namespace, claim string, v *Volume) error {
	pvc, err := r.pvcs.PersistentVolumeClaims(namespace).Get(claim)
	if apierrors.IsNotFound(err) {
		v.Kind, v.Detail = KindUnresolved, fmt.Sprintf("PVC %s/%s not found", namespace, claim)
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up PVC %s/%s: %w", namespace, claim, err)
	}
	if pvc.Spec.VolumeName == "" {
		v.Kind, v.Detail = KindUnresolved, fmt.Sprintf("PVC %s/%s is not bound", namespace, claim)
		return nil
	}
	pv, err := r.pvs.Get(pvc.Spec.VolumeName)
	if apierrors.IsNotFound(err) {
		v.Kind, v.Detail = KindUnresolved, fmt.Sprintf("PV %s not found", pvc.Spec.VolumeName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up PV %s: %w", pvc.Spec.VolumeName, err)
	}
	v.PV = pv.Name
	v.RWX = slices.Contains(pv.Spec.AccessModes, v1.ReadWriteMany)
	v.ROXOnly = len(pv.Spec.AccessModes) > 0 && !slices.ContainsFunc(pv.Spec.AccessModes, func(m v1.PersistentVolumeAccessMode) bool { return m != v1.ReadOnlyMany })
	switch {
	case pv.Spec.CSI != nil:
		v.Kind, v.Driver, v.Handle = KindCSI, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
		safe, err := r.SafeDetach(v.Driver)
		if err != nil {
			return err
		}
		v.SafeDetach = safe
	case pv.Spec.Local != nil, pv.Spec.HostPath != nil:
		v.Kind, v.Detail = KindNodeLocal, fmt.Sprintf("PV %s is node-local", pv.Name)
	default:
		v.Kind, v.Detail = KindOther, fmt.Sprintf("PV %s is not a CSI volume", pv.Name)
	}
	return nil
}
