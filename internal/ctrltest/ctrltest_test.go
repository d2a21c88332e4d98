package ctrltest

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
)

// TestSyncSeesTheLastSyncsWrites: a sync that deletes a pod the pod cache
// holds, and creates a FencingRequest from a generateName, leaves the
// caches matching the API servers, so that the next sync finds the pod gone
// and the request there; the writes and the Event are each sync's own.
func TestSyncSeesTheLastSyncsWrites(t *testing.T) {
	f := New(t, testobj.Epoch, testobj.Node("n1"), testobj.Pod("ns", "a", testobj.OnNode("n1")), testobj.FencePolicy("p"))
	pods := f.Informers.Core().V1().Pods().Lister()
	requests := f.FencingInformers.Fencing().V1alpha1().FencingRequests().Lister()
	f.Informers.Core().V1().Nodes().Informer()
	f.FencingInformers.Fencing().V1alpha1().FencePolicies().Informer()
	f.Start()

	sync := func(ctx context.Context, node string) (time.Duration, error) {
		p, err := pods.Pods("ns").Get("a")
		if err != nil {
			return 0, nil // gone: nothing to do
		}
		if err := f.Kube.CoreV1().Pods("ns").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return 0, err
		}
		r := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"}}
		if _, err := f.Fencing.FencingV1alpha1().FencingRequests().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
		f.Recorder.Event(p, v1.EventTypeWarning, "Deleted", "pod deleted")
		return time.Second, nil
	}
	r := f.Sync(sync, "n1")
	if r.Err != nil || r.After != time.Second {
		t.Fatalf("first sync = %v, %s", r.Err, r.After)
	}
	WantWrites(t, r.Writes, []string{"delete pods ns/a"}, []string{"create fencingrequests n1-00001"})
	WantEvents(t, r.Events, "Warning Deleted")
	created, err := requests.Get("n1-00001")
	if err != nil {
		t.Fatalf("the created request is not in the cache after the sync: %v", err)
	}
	if created.UID == "" || !created.CreationTimestamp.Time.Equal(testobj.Epoch) {
		t.Errorf("created request has UID %q and creation time %s, want a UID and the clock's time", created.UID, created.CreationTimestamp)
	}

	r = f.Sync(sync, "n1")
	WantWrites(t, r.Writes)
	WantEvents(t, r.Events)
}

// TestSettleWaitsForAChangeMadeOutsideASync: an update the test makes
// reaches the cache before Settle returns.
func TestSettleWaitsForAChangeMadeOutsideASync(t *testing.T) {
	f := New(t, testobj.Epoch, testobj.Node("n1"))
	nodes := f.Informers.Core().V1().Nodes().Lister()
	f.Start()
	n := testobj.Node("n1", testobj.NotReadySince(testobj.Epoch))
	if _, err := f.Kube.CoreV1().Nodes().UpdateStatus(f.Ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Settle()
	cached, err := nodes.Get("n1")
	if err != nil || cached.Status.Conditions[0].Status != v1.ConditionFalse {
		t.Fatalf("cached node after Settle = %+v, %v; want NotReady", cached, err)
	}
	WantWrites(t, f.Writes(), []string{"update nodes/status n1"})
}

func write(verb, resource, ns, name string) Write {
	return Write{Verb: verb, Resource: resource, Namespace: ns, Name: name}
}

func TestCheckWrites(t *testing.T) {
	intent := write("patch", "volumeattachments", "", "va-1")
	mark := Write{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "ns", Name: "a"}
	del := write("delete", "pods", "ns", "a")
	tests := []struct {
		name    string
		got     []Write
		steps   [][]string
		wantErr string
	}{
		{"in order", []Write{intent, mark, del}, [][]string{{"patch volumeattachments va-1"}, {"update pods/status ns/a"}, {"delete pods ns/a"}}, ""},
		{"any order within a step", []Write{del, mark}, [][]string{{"update pods/status ns/a", "delete pods ns/a"}}, ""},
		{"no write wanted, none made", nil, nil, ""},
		{"a step out of order", []Write{mark, intent, del}, [][]string{{"patch volumeattachments va-1"}, {"update pods/status ns/a", "delete pods ns/a"}}, "came where step 1 wants"},
		{"a write missing", []Write{intent}, [][]string{{"patch volumeattachments va-1"}, {"delete pods ns/a"}}, "1 writes"},
		{"a write too many", []Write{intent, del}, [][]string{{"delete pods ns/a"}}, "2 writes"},
		{"another write", []Write{write("delete", "pods", "ns", "b")}, [][]string{{"delete pods ns/a"}}, "came where"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckWrites(tc.got, tc.steps...)
			if (tc.wantErr == "") != (got == "") || !strings.Contains(got, tc.wantErr) {
				t.Errorf("CheckWrites = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestCheckEvents(t *testing.T) {
	got := []string{"Warning FencelineForceDeleted Force-deleted: node n1 out of service", "Normal FencelineFenceIntentRecorded Recorded fence intent"}
	tests := []struct {
		name string
		want []string
		ok   bool
	}{
		{"each matched, any order", []string{"FenceIntentRecorded", "Warning FencelineForceDeleted"}, true},
		{"a phrase of the message", []string{"out of service", "Recorded"}, true},
		{"one left over", []string{"FencelineForceDeleted"}, false},
		{"one missing", []string{"FencelineForceDeleted", "FenceIntent", "Tainted"}, false},
		{"two wants cannot share an Event", []string{"Fenceline", "FencelineForceDeleted"}, true},
		{"the same Event twice", []string{"FencelineForceDeleted", "FencelineForceDeleted"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := CheckEvents(got, tc.want...); (d == "") != tc.ok {
				t.Errorf("CheckEvents(%q) = %q, want ok %v", tc.want, d, tc.ok)
			}
		})
	}
}

// TestCreateKeepsAGivenNameAndUID: the API server's create only fills in
// what the object lacks.
func TestCreateKeepsAGivenNameAndUID(t *testing.T) {
	f := New(t, testobj.Epoch)
	f.Start()
	p := testobj.Pod("ns", "a")
	got, err := f.Kube.CoreV1().Pods("ns").Create(f.Ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "a" || got.UID != types.UID("uid-ns-a") {
		t.Errorf("created pod %s with UID %s, want a with uid-ns-a", got.Name, got.UID)
	}
}
