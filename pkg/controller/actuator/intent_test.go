package actuator_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

const drv = "mock.fenceline.io"

// attachedVA is the attach/detach controller's VolumeAttachment of a
// volume on node-a, named as it names them, attached with node ID id.
func attachedVA(handle, pv, id string) *storagev1.VolumeAttachment {
	va := testobj.VA(nodeutil.CSIAttachmentName(drv, handle, "node-a"), drv, pv, "node-a")
	if id != "" {
		va.Annotations = map[string]string{names.NodeIDAnnotation: id}
	}
	return va
}

func withIntent(va *storagev1.VolumeAttachment) *storagev1.VolumeAttachment {
	va = va.DeepCopy()
	if va.Annotations == nil {
		va.Annotations = map[string]string{}
	}
	va.Annotations[names.FenceIntentAnnotation] = `{"v":1,"reason":"out-of-service"}`
	return va
}

func TestIntentTargets(t *testing.T) {
	vol1, vol2, vol3 := nodeutil.CSIUniqueVolumeName(drv, "h1"), nodeutil.CSIUniqueVolumeName(drv, "h2"), nodeutil.CSIUniqueVolumeName(drv, "h3")
	va1, va2 := attachedVA("h1", "pv-1", "id-a"), attachedVA("h2", "pv-2", "")
	oddName := testobj.VA("made-by-hand", drv, "pv-3", "node-a")
	otherNode := testobj.VA("elsewhere", drv, "pv-1", "node-b")
	node := testobj.Node("node-a", testobj.VolumesAttached(vol1, vol2, vol3, "kubernetes.io/iscsi/in-tree"))
	name := func(h string) string { return nodeutil.CSIAttachmentName(drv, h, "node-a") }
	tests := []struct {
		name string
		in   actuator.Intent
		want []actuator.IntentTarget
	}{
		{"no node: nothing", actuator.Intent{Volumes: []v1.UniqueVolumeName{vol1}}, nil},
		{"one pod's volume: its cached VA, with its node ID", actuator.Intent{Node: node, Volumes: []v1.UniqueVolumeName{vol1}, PVs: []string{"pv-1"}, Cached: []*storagev1.VolumeAttachment{va1, va2, otherNode}},
			[]actuator.IntentTarget{{Name: name("h1"), NodeID: "id-a"}}},
		{"a volume the cache has no VA for: the attach/detach controller's name", actuator.Intent{Node: node, Volumes: []v1.UniqueVolumeName{vol3}, PVs: []string{"pv-3"}},
			[]actuator.IntentTarget{{Name: name("h3")}}},
		{"a cached VA of the PV under another name is covered too", actuator.Intent{Node: node, Volumes: []v1.UniqueVolumeName{vol3}, PVs: []string{"pv-3"}, Cached: []*storagev1.VolumeAttachment{oddName}},
			[]actuator.IntentTarget{{Name: name("h3")}, {Name: "made-by-hand"}}},
		{"already carries an intent: not rewritten", actuator.Intent{Node: node, Volumes: []v1.UniqueVolumeName{vol1}, PVs: []string{"pv-1"}, Cached: []*storagev1.VolumeAttachment{withIntent(va1)}}, nil},
		{"all of the node: cached VAs and every CSI volume attached", actuator.Intent{Node: node, AllOfNode: true, Cached: []*storagev1.VolumeAttachment{va1, withIntent(va2), oddName, otherNode}},
			[]actuator.IntentTarget{{Name: name("h1"), NodeID: "id-a"}, {Name: name("h3")}, {Name: "made-by-hand"}}},
		{"a volume name that is not CSI is skipped", actuator.Intent{Node: node, Volumes: []v1.UniqueVolumeName{"kubernetes.io/iscsi/in-tree"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := actuator.IntentTargets(tc.in)
			slices.SortFunc(tc.want, func(a, b actuator.IntentTarget) int { return strings.Compare(a.Name, b.Name) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("IntentTargets() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRecordIntent(t *testing.T) {
	va1, va2 := attachedVA("h1", "pv-1", "id-a"), attachedVA("h2", "pv-2", "")
	va1.Annotations["someone/else"] = "kept"
	node := testobj.Node("node-a", testobj.VolumesAttached(nodeutil.CSIUniqueVolumeName(drv, "h1"), nodeutil.CSIUniqueVolumeName(drv, "gone")))
	in := actuator.Intent{Reason: cutoff.ReasonOutOfService, Controller: "podgc", Node: node, AllOfNode: true, Cached: []*storagev1.VolumeAttachment{va1, va2}}

	t.Run("written on every VolumeAttachment, a missing one skipped", func(t *testing.T) {
		client := fake.NewClientset(va1, va2)
		rec := record.NewFakeRecorder(10)
		a := &actuator.Actuator{Client: client, Recorder: rec}
		if err := a.RecordIntent(context.Background(), in); err != nil {
			t.Fatalf("RecordIntent() = %v", err)
		}
		for _, want := range []struct{ va, nodeID string }{{va1.Name, "id-a"}, {va2.Name, ""}} {
			got, err := client.StorageV1().VolumeAttachments().Get(context.Background(), want.va, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := cutoff.IntentOf(got)
			if err != nil || r == nil || r.Reason != cutoff.ReasonOutOfService || r.By != "fenceline-controller/podgc" || r.NodeID != want.nodeID || r.Version != cutoff.RecordVersion {
				t.Errorf("%s: intent %+v, %v; want out-of-service by podgc with node ID %q", want.va, r, err, want.nodeID)
			}
		}
		got, _ := client.StorageV1().VolumeAttachments().Get(context.Background(), va1.Name, metav1.GetOptions{})
		if got.Annotations["someone/else"] != "kept" || got.Annotations[names.NodeIDAnnotation] != "id-a" {
			t.Errorf("other annotations changed: %v", got.Annotations)
		}
		if ev := <-rec.Events; !strings.Contains(ev, "Normal FencelineFenceIntentRecorded") || !strings.Contains(ev, "on 2 VolumeAttachment") {
			t.Errorf("Event %q, want one FencelineFenceIntentRecorded for 2", ev)
		}
	})
	t.Run("a failed write is returned, so the caller does not act", func(t *testing.T) {
		client := fake.NewClientset(va1, va2)
		client.PrependReactor("patch", "volumeattachments", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		})
		a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
		err := a.RecordIntent(context.Background(), in)
		if err == nil || !strings.Contains(err.Error(), "the write is not made") || !strings.Contains(err.Error(), "etcd is down") {
			t.Errorf("RecordIntent() = %v, want an error that stops the write", err)
		}
	})
	t.Run("dry run writes nothing", func(t *testing.T) {
		client := fake.NewClientset(va1, va2)
		a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10), DryRun: true}
		if err := a.RecordIntent(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		for _, act := range client.Actions() {
			if act.GetVerb() == "patch" {
				t.Errorf("dry run patched: %v", act)
			}
		}
	})
}
