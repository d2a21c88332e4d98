package actuator_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// always is a re-check that still holds on fresh data.
func always(*v1.Node, *v1.Pod) (bool, string) { return true, "still holds" }

// otherClientDeletesFirst makes the pod vanish just before our delete
// reaches the API server, as when another client's graceful delete of the
// Failed pod becomes immediate.
func otherClientDeletesFirst(tracker clienttesting.ObjectTracker) clienttesting.ReactionFunc {
	return func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteAction)
		if err := tracker.Delete(d.GetResource(), d.GetNamespace(), d.GetName()); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewNotFound(podsResource, d.GetName())
	}
}

func deleteFails(clienttesting.ObjectTracker) clienttesting.ReactionFunc {
	return func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	}
}

// TestForceDeletePodOutcomes: which outcomes count as our force deletion
// (Event, metric) and which as someone else's.
func TestForceDeletePodOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		pod       *v1.Pod
		inCluster bool
		onDelete  func(clienttesting.ObjectTracker) clienttesting.ReactionFunc
		wantErr   bool
		// wantEvent is a prefix of the one Event recorded, "" for none.
		wantEvent string
	}{
		{
			name:      "our delete removes the pod",
			pod:       testobj.Pod("ns", "db-0", testobj.OnNode("n1")),
			inCluster: true,
			wantEvent: "Warning FencelineForceDeleted Force-deleted: node is down",
		},
		{
			name:      "another client's delete completes after we marked the pod Failed",
			pod:       testobj.Pod("ns", "db-0", testobj.OnNode("n1")),
			inCluster: true,
			onDelete:  otherClientDeletesFirst,
			wantEvent: "Warning FencelineForceDeleted Force-deleted: node is down (marked Failed; another client's pending delete",
		},
		{
			name:      "pod gone before we touched it",
			pod:       testobj.Pod("ns", "db-0", testobj.OnNode("n1")),
			inCluster: false,
		},
		{
			name: "pod already Failed and deleted by another client",
			pod: func() *v1.Pod {
				p := testobj.Pod("ns", "db-0", testobj.OnNode("n1"))
				p.Status.Phase = v1.PodFailed
				return p
			}(),
			inCluster: true,
			onDelete:  otherClientDeletesFirst,
		},
		{
			name:      "delete fails",
			pod:       testobj.Pod("ns", "db-0", testobj.OnNode("n1")),
			inCluster: true,
			onDelete:  deleteFails,
			wantErr:   true,
			wantEvent: "Warning FencelineForceDeleteFailed Force deletion failed:",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.inCluster {
				objs = append(objs, tc.pod.DeepCopy())
			}
			client := fake.NewClientset(objs...)
			if tc.onDelete != nil {
				client.PrependReactor("delete", "pods", tc.onDelete(client.Tracker()))
			}
			rec := record.NewFakeRecorder(10)
			a := &actuator.Actuator{Client: client, Recorder: rec}
			err := a.ForceDeletePod(t.Context(), tc.pod, actuator.Deletion{Reason: metrics.ReasonForceEviction, Message: "node is down", Recheck: always})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tc.wantErr)
			}
			var events []string
			for len(rec.Events) > 0 {
				events = append(events, <-rec.Events)
			}
			switch {
			case tc.wantEvent == "" && len(events) != 0:
				t.Errorf("events = %q, want none", events)
			case tc.wantEvent != "" && (len(events) != 1 || !strings.HasPrefix(events[0], tc.wantEvent)):
				t.Errorf("events = %q, want one starting with %q", events, tc.wantEvent)
			}
		})
	}
}

// TestWritesRequireARecheck: a write without a decision to re-check is
// refused, never made blindly.
func TestWritesRequireARecheck(t *testing.T) {
	pod := testobj.Pod("ns", "db-0", testobj.OnNode("n1"))
	node := testobj.Node("n1", testobj.VolumesInUse("v"))
	client := fake.NewClientset(pod.DeepCopy(), node.DeepCopy())
	a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
	if err := a.ForceDeletePod(t.Context(), pod, actuator.Deletion{Reason: metrics.ReasonForceEviction}); !actuator.IsDecisionChanged(err) {
		t.Errorf("ForceDeletePod without Recheck: error %v, want a DecisionChangedError", err)
	}
	if _, err := a.ReleaseVolumes(t.Context(), node, []v1.UniqueVolumeName{"v"}, false, "test", nil); !actuator.IsDecisionChanged(err) {
		t.Errorf("ReleaseVolumes without a check: error %v, want a DecisionChangedError", err)
	}
	if len(client.Actions()) == 0 {
		t.Fatal("no API call at all")
	}
	for _, act := range client.Actions() {
		if act.GetVerb() != "get" {
			t.Errorf("unexpected write %s %s", act.GetVerb(), act.GetResource().Resource)
		}
	}
}
