package nodefencing

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestStorageStatus(t *testing.T) {
	type want struct {
		storage []fencingv1alpha1.StorageFenceStatus
		status  metav1.ConditionStatus
		reason  string
	}
	tests := []struct {
		name      string
		fenced    map[string][]string
		remaining map[string][]string
		want      want
		netFenced map[string]bool
	}{
		{"nothing attached, nothing seen: every volume is off the node", nil, nil, want{nil, metav1.ConditionTrue, ReasonStorageFenced}, nil},
		{"two fenced detaches, none left", map[string][]string{"a.csi": {"va-2", "va-1"}}, nil, want{[]fencingv1alpha1.StorageFenceStatus{
			{Driver: "a.csi", Fenced: true, VolumeAttachments: []string{"va-1", "va-2"}, Message: "2 VolumeAttachments detached with fence=true"}}, metav1.ConditionTrue, ReasonStorageFenced}, nil},
		{"one fenced, one of the same driver left", map[string][]string{"a.csi": {"va-1"}}, map[string][]string{"a.csi": {"va-2"}}, want{[]fencingv1alpha1.StorageFenceStatus{
			{Driver: "a.csi", Fenced: false, VolumeAttachments: []string{"va-1"}, Message: "1 VolumeAttachments detached with fence=true; 1 still attached or detaching"}}, metav1.ConditionFalse, ReasonStorageWaiting}, nil},
		{"a driver with nothing fenced yet is listed, not fenced", map[string][]string{"a.csi": {"va-1"}}, map[string][]string{"b.csi": {"vb-1"}}, want{[]fencingv1alpha1.StorageFenceStatus{
			{Driver: "a.csi", Fenced: true, VolumeAttachments: []string{"va-1"}, Message: "1 VolumeAttachments detached with fence=true"},
			{Driver: "b.csi", Fenced: false, Message: "0 VolumeAttachments detached with fence=true; 1 still attached or detaching"}}, metav1.ConditionFalse, ReasonStorageWaiting}, nil},
		{name: "a confirmed NetworkFence fences its driver with volumes left", netFenced: map[string]bool{"b.csi": true}, fenced: map[string][]string{"a.csi": {"va-1"}}, remaining: map[string][]string{"b.csi": {"vb-1"}}, want: want{[]fencingv1alpha1.StorageFenceStatus{
			{Driver: "a.csi", Fenced: true, VolumeAttachments: []string{"va-1"}, Message: "1 VolumeAttachments detached with fence=true"},
			{Driver: "b.csi", Fenced: true, Message: "0 VolumeAttachments detached with fence=true; its NetworkFences are confirmed"}}, metav1.ConditionTrue, ReasonStorageFenced}},
		{name: "an unconfirmed NetworkFence does not", netFenced: map[string]bool{"b.csi": false}, remaining: map[string][]string{"b.csi": {"vb-1"}}, want: want{[]fencingv1alpha1.StorageFenceStatus{
			{Driver: "b.csi", Fenced: false, Message: "0 VolumeAttachments detached with fence=true; 1 still attached or detaching"}}, metav1.ConditionFalse, ReasonStorageWaiting}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			storage, status, reason, msg := StorageStatus(tc.fenced, tc.remaining, tc.netFenced)
			if !reflect.DeepEqual(storage, tc.want.storage) || status != tc.want.status || reason != tc.want.reason || msg == "" {
				t.Fatalf("StorageStatus = %+v %s %s %q, want %+v %s %s", storage, status, reason, msg, tc.want.storage, tc.want.status, tc.want.reason)
			}
		})
	}
}

// TestSyncReportsStorage: once n1 is fenced, its VolumeAttachments are
// detached by the attacher, each with its fence record; the request lists
// them and turns StorageFenced True only when none is left. A
// VolumeAttachment deleted without a record (a plain detach) is not
// listed as fenced.
func TestSyncReportsStorage(t *testing.T) {
	now := testobj.Epoch
	record := testobj.VAAnnotation(names.FenceRecordAnnotation, `{"reason":"OutOfService"}`)
	e := newEnv(t, now, cluster(now, nil,
		testobj.VA("va-1", "a.csi", "pv-1", "n1", record), testobj.VA("va-2", "a.csi", "pv-2", "n1", record),
		testobj.VA("vb-1", "b.csi", "pv-3", "n1"))...)
	e.fenceToFenced()
	e.sync("n1")
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestStorageFenced, metav1.ConditionFalse, ReasonStorageWaiting)

	del := func(name string) {
		t.Helper()
		if err := e.Kube.StorageV1().VolumeAttachments().Delete(e.Ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.Settle()
	}
	del("va-1")
	e.sync("n1")
	if got := e.request("n1").Status.Storage; len(got) != 2 || got[0].Driver != "a.csi" || got[0].Fenced || !reflect.DeepEqual(got[0].VolumeAttachments, []string{"va-1"}) {
		t.Fatalf("storage after va-1 = %+v, want a.csi not fenced yet, listing va-1", got)
	}
	del("va-2")
	del("vb-1")
	e.sync("n1")
	got := e.request("n1").Status.Storage
	want := []fencingv1alpha1.StorageFenceStatus{
		{Driver: "a.csi", Fenced: true, VolumeAttachments: []string{"va-1", "va-2"}, Message: "2 VolumeAttachments detached with fence=true"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("storage = %+v, want %+v (vb-1 had no fence record)", got, want)
	}
	e.wantRequestCondition("n1", fencingv1alpha1.FencingRequestStorageFenced, metav1.ConditionTrue, ReasonStorageFenced)
	writes := len(e.Fencing.Actions())
	e.sync("n1")
	if n := len(e.Fencing.Actions()) - writes; n != 0 {
		t.Errorf("a sync with nothing new made %d requests to the API server: %v", n, e.Fencing.Actions()[writes:])
	}
}
