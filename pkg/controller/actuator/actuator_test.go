package actuator_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/actuator"
	"fenceline.io/fenceline/pkg/controller/metrics"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
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

// nodeDown is a re-check that holds while the pod's node exists and is not
// Ready.
func nodeDown(node *v1.Node, _ *v1.Pod) (bool, string) {
	switch {
	case node == nil:
		return false, "node is gone"
	case nodeutil.IsReady(node):
		return false, "node is Ready"
	}
	return true, "node is down"
}

// conflictOnce makes the first status write of a pod fail with a conflict,
// as when a kubelet reported in since the pod was read.
func conflictOnce() clienttesting.ReactionFunc {
	var once sync.Once
	return func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		handled := false
		once.Do(func() { handled = true })
		if !handled {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(podsResource, a.(clienttesting.UpdateAction).GetObject().(*v1.Pod).Name, errors.New("the pod changed"))
	}
}

// TestForceDeletePodFreshNode: a node the caller read fresh (Deletion.Node)
// decides the first re-check in place of a read of its own, and only the
// first: a retry after a conflict reads the node again.
func TestForceDeletePodFreshNode(t *testing.T) {
	t0 := testobj.Epoch
	running := testobj.Pod("ns", "db-0", testobj.OnNode("n1"))
	failed := testobj.Pod("ns", "db-0", testobj.OnNode("n1"))
	failed.Status.Phase = v1.PodFailed
	down, up := testobj.Node("n1", testobj.NotReadySince(t0)), testobj.Node("n1", testobj.ReadySince(t0))
	tests := []struct {
		name string
		pod  *v1.Pod
		// fresh is the caller's read, apiNode the node as the API server
		// has it.
		fresh    *actuator.FreshNode
		apiNode  *v1.Node
		conflict bool
		// wantGets counts the node reads ForceDeletePod makes itself.
		wantGets    int
		wantChanged bool
		wantDeleted bool
	}{{
		name:        "the caller's read decides: no read of its own",
		pod:         running,
		fresh:       &actuator.FreshNode{Name: "n1", Node: down},
		apiNode:     up,
		wantDeleted: true,
	}, {
		name:        "the caller's read found the node Ready: nothing is written",
		pod:         running,
		fresh:       &actuator.FreshNode{Name: "n1", Node: up},
		apiNode:     down,
		wantChanged: true,
	}, {
		name:        "the caller's read found no node: the re-check decides on none",
		pod:         running,
		fresh:       &actuator.FreshNode{Name: "n1"},
		apiNode:     down,
		wantChanged: true,
	}, {
		name:        "a read of another node is not used: the pod's node is read",
		pod:         running,
		fresh:       &actuator.FreshNode{Name: "n2", Node: down},
		apiNode:     up,
		wantGets:    1,
		wantChanged: true,
	}, {
		name:        "a conflict on the status write: the retry reads the node again and finds it Ready",
		pod:         running,
		fresh:       &actuator.FreshNode{Name: "n1", Node: down},
		apiNode:     up,
		conflict:    true,
		wantGets:    1,
		wantChanged: true,
	}, {
		name:        "without the caller's read: one read of its own, as ever",
		pod:         running,
		apiNode:     down,
		wantGets:    1,
		wantDeleted: true,
	}, {
		name:        "a pod Failed already: the caller's read decides before the delete",
		pod:         failed,
		fresh:       &actuator.FreshNode{Name: "n1", Node: down},
		apiNode:     up,
		wantDeleted: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.pod.DeepCopy(), tc.apiNode.DeepCopy())
			if tc.conflict {
				client.PrependReactor("update", "pods", conflictOnce())
			}
			var gets atomic.Int32
			client.PrependReactor("get", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				gets.Add(1)
				return false, nil, nil
			})
			a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10)}
			err := a.ForceDeletePod(t.Context(), tc.pod, actuator.Deletion{Reason: metrics.ReasonOutOfService, Message: "node is down", Recheck: nodeDown, Node: tc.fresh})
			if actuator.IsDecisionChanged(err) != tc.wantChanged || (err != nil && !tc.wantChanged) {
				t.Errorf("ForceDeletePod = %v, want a decision changed %v", err, tc.wantChanged)
			}
			if got := int(gets.Load()); got != tc.wantGets {
				t.Errorf("%d reads of the node, want %d", got, tc.wantGets)
			}
			got, gerr := client.CoreV1().Pods("ns").Get(t.Context(), "db-0", metav1.GetOptions{})
			switch {
			case tc.wantDeleted && !apierrors.IsNotFound(gerr):
				t.Errorf("pod still there (%v), want it deleted", gerr)
			case !tc.wantDeleted && gerr != nil:
				t.Errorf("pod: %v, want it kept", gerr)
			case !tc.wantDeleted && got.Status.Phase != tc.pod.Status.Phase:
				t.Errorf("pod phase %q, want %q: no status write", got.Status.Phase, tc.pod.Status.Phase)
			}
		})
	}
}

// TestReadNode: a node read for a Deletion; one that does not exist is a
// read without a node; a dry run reads nothing.
func TestReadNode(t *testing.T) {
	tests := []struct {
		name     string
		objs     []runtime.Object
		dryRun   bool
		want     *actuator.FreshNode
		wantGets int
	}{
		{"the node as the API server has it", []runtime.Object{testobj.Node("n1")}, false, &actuator.FreshNode{Name: "n1", Node: testobj.Node("n1")}, 1},
		{"no such node: a read without a node", nil, false, &actuator.FreshNode{Name: "n1"}, 1},
		{"dry run: no read", []runtime.Object{testobj.Node("n1")}, true, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objs...)
			a := &actuator.Actuator{Client: client, Recorder: record.NewFakeRecorder(10), DryRun: tc.dryRun}
			got, err := a.ReadNode(t.Context(), "n1")
			if err != nil {
				t.Fatalf("ReadNode = %v", err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && (got.Name != tc.want.Name || (got.Node == nil) != (tc.want.Node == nil))) {
				t.Errorf("ReadNode = %+v, want %+v", got, tc.want)
			}
			if n := len(client.Actions()); n != tc.wantGets {
				t.Errorf("%d API calls, want %d", n, tc.wantGets)
			}
		})
	}
}
