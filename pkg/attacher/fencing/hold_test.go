package fencing

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
)

func TestPublishHold(t *testing.T) {
	const fin = "external-attacher/mock-fenceline-io"
	rwo := testobj.CSIPV("pv-1", "mock.fenceline.io", "vol-1", v1.ReadWriteOnce)
	rwop := testobj.CSIPV("pv-1", "mock.fenceline.io", "vol-1", v1.ReadWriteOncePod)
	rwx := testobj.CSIPV("pv-1", "mock.fenceline.io", "vol-1", v1.ReadWriteMany)
	rox := testobj.CSIPV("pv-1", "mock.fenceline.io", "vol-1", v1.ReadOnlyMany)
	va := func(node string, deleting bool, finalizers ...string) *storagev1.VolumeAttachment {
		a := testobj.VA("va-"+node, "mock.fenceline.io", "pv-1", node)
		a.Finalizers = finalizers
		if deleting {
			a.DeletionTimestamp = &metav1.Time{Time: testobj.Epoch}
		}
		return a
	}
	tests := []struct {
		name     string
		pv       *v1.PersistentVolume
		others   []*storagev1.VolumeAttachment
		want     bool
		whyNames string
	}{
		{"no other attachment", rwo, nil, false, ""},
		{"RWO, old node's detach pending: hold", rwo, []*storagev1.VolumeAttachment{va("node-a", true, fin)}, true, "va-node-a (node node-a)"},
		{"RWOP, old node's detach pending: hold", rwop, []*storagev1.VolumeAttachment{va("node-a", true, fin)}, true, "va-node-a"},
		{"RWX: never held", rwx, []*storagev1.VolumeAttachment{va("node-a", true, fin)}, false, ""},
		{"ROX: never held", rox, []*storagev1.VolumeAttachment{va("node-a", true, fin)}, false, ""},
		{"old detach finished (our finalizer gone)", rwo, []*storagev1.VolumeAttachment{va("node-a", true, "other/finalizer")}, false, ""},
		{"other attachment not being deleted: not a detach", rwo, []*storagev1.VolumeAttachment{va("node-a", false, fin)}, false, ""},
		{"the same node's attachment is not another node's", rwo, []*storagev1.VolumeAttachment{va("node-b", true, fin)}, false, ""},
		{"PV unknown: nothing to judge, the publish path reports it", nil, []*storagev1.VolumeAttachment{va("node-a", true, fin)}, false, ""},
		{"several pending, all named", rwo, []*storagev1.VolumeAttachment{va("node-c", true, fin), va("node-a", true, fin)}, true, "va-node-a (node node-a), va-node-c (node node-c)"},
	}
	for _, tc := range tests {
		hold, why := PublishHold(tc.pv, "node-b", fin, tc.others)
		if hold != tc.want || !strings.Contains(why, tc.whyNames) || (hold && why == "") {
			t.Errorf("%s: PublishHold() = %v, %q; want %v naming %q", tc.name, hold, why, tc.want, tc.whyNames)
		}
	}
}
