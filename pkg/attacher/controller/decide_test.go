package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestNeedsDetach(t *testing.T) {
	deleting := func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
		va.DeletionTimestamp = ptr.To(metav1.NewTime(time.Now()))
		return va
	}
	withFinalizers := func(va *storagev1.VolumeAttachment, f ...string) *storagev1.VolumeAttachment {
		va.Finalizers = f
		return va
	}
	foreign := func(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
		va.Spec.Attacher = "other.example.com"
		return va
	}
	tests := []struct {
		name string
		va   *storagev1.VolumeAttachment
		want bool
	}{
		{"nil", nil, false},
		{"not deleting", withFinalizers(vaFor("a", "pv", testNode), testFinalizer), false},
		{"deleting with our finalizer", deleting(withFinalizers(vaFor("a", "pv", testNode), testFinalizer)), true},
		{"deleting among other finalizers", deleting(withFinalizers(vaFor("a", "pv", testNode), "x/y", testFinalizer)), true},
		{"deleting without our finalizer", deleting(withFinalizers(vaFor("a", "pv", testNode), "x/y")), false},
		{"another driver's VA", foreign(deleting(withFinalizers(vaFor("a", "pv", testNode), testFinalizer))), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsDetach(tc.va, testDriver, testFinalizer); got != tc.want {
				t.Errorf("needsDetach = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVolumeCapability(t *testing.T) {
	block := v1.PersistentVolumeBlock
	tests := []struct {
		name      string
		pv        func(*v1.PersistentVolume)
		defaultFS string
		snmw      bool
		wantMode  csi.VolumeCapability_AccessMode_Mode
		wantFS    string
		wantBlock bool
		wantFlags []string
		wantErr   bool
	}{
		{name: "RWO mount without fsType", wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "default fsType applies", defaultFS: "ext4", wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, wantFS: "ext4"},
		{name: "PV fsType wins over the default", defaultFS: "ext4", pv: func(pv *v1.PersistentVolume) { pv.Spec.CSI.FSType = "xfs" },
			wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, wantFS: "xfs"},
		{name: "mount options", pv: func(pv *v1.PersistentVolume) { pv.Spec.MountOptions = []string{"noatime"} },
			wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, wantFlags: []string{"noatime"}},
		{name: "block volume", pv: func(pv *v1.PersistentVolume) { pv.Spec.VolumeMode = &block },
			wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, wantBlock: true},
		{name: "RWO with SINGLE_NODE_MULTI_WRITER", snmw: true, wantMode: csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{name: "ROX", pv: func(pv *v1.PersistentVolume) { pv.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany} },
			wantMode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{name: "no access modes is an error", pv: func(pv *v1.PersistentVolume) { pv.Spec.AccessModes = nil }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pv := pvFor("pv", "vol")
			if tc.pv != nil {
				tc.pv(pv)
			}
			got, err := volumeCapability(pv, tc.defaultFS, tc.snmw)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.GetAccessMode().GetMode() != tc.wantMode {
				t.Errorf("mode = %v, want %v", got.GetAccessMode().GetMode(), tc.wantMode)
			}
			if (got.GetBlock() != nil) != tc.wantBlock {
				t.Errorf("block = %v, want %v", got.GetBlock() != nil, tc.wantBlock)
			}
			if !tc.wantBlock {
				if got.GetMount().GetFsType() != tc.wantFS {
					t.Errorf("fsType = %q, want %q", got.GetMount().GetFsType(), tc.wantFS)
				}
				if !slices.Equal(got.GetMount().GetMountFlags(), tc.wantFlags) {
					t.Errorf("mount flags = %v, want %v", got.GetMount().GetMountFlags(), tc.wantFlags)
				}
			}
		})
	}
}

func TestOnlyErrorsChanged(t *testing.T) {
	base := vaFor("a", "pv", testNode)
	base.ResourceVersion = "1"
	mod := func(f func(va *storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		va := base.DeepCopy()
		va.ResourceVersion = "2"
		f(va)
		return va
	}
	tests := []struct {
		name string
		new  *storagev1.VolumeAttachment
		want bool
	}{
		{"resync of the same version re-queues", base.DeepCopy(), false},
		{"only attachError", mod(func(va *storagev1.VolumeAttachment) {
			va.Status.AttachError = &storagev1.VolumeError{Message: "x"}
		}), true},
		{"only detachError", mod(func(va *storagev1.VolumeAttachment) {
			va.Status.DetachError = &storagev1.VolumeError{Message: "x"}
		}), true},
		{"deletion started", mod(func(va *storagev1.VolumeAttachment) {
			va.DeletionTimestamp = ptr.To(metav1.Now())
		}), false},
		{"attached changed", mod(func(va *storagev1.VolumeAttachment) { va.Status.Attached = true }), false},
		{"finalizers changed", mod(func(va *storagev1.VolumeAttachment) { va.Finalizers = []string{"x"} }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyErrorsChanged(base, tc.new); got != tc.want {
				t.Errorf("onlyErrorsChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
