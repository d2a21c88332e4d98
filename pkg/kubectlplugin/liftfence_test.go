package kubectlplugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

func yes(string) (bool, error) { return true, nil }

func TestLiftFence(t *testing.T) {
	other := storageFence("other")
	other.Spec.Driver = "nfs.example.com"
	other.Status.NodeName = "dead"
	tests := []struct {
		name    string
		o       LiftFenceOptions
		asked   []string
		wantErr string
	}{
		{name: "by node name, every driver", o: LiftFenceOptions{Node: "dead"}, asked: []string{"sf-dead", "sf-other"}},
		{name: "by node ID", o: LiftFenceOptions{Node: "csi-dead"}, asked: []string{"sf-dead"}},
		{name: "one driver", o: LiftFenceOptions{Node: "dead", Driver: "nfs.example.com"}, asked: []string{"sf-other"}},
		{name: "no such node", o: LiftFenceOptions{Node: "live"}, wantErr: `no StorageFence names node "live"`},
		{name: "not confirmed", o: LiftFenceOptions{Node: "dead", Confirm: func(string) (bool, error) { return false, nil }}, wantErr: "not confirmed; nothing written"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, f := fakeClients(nil, []runtime.Object{storageFence("dead"), other})
			o := tc.o
			o.Requester, o.Reason, o.ConfirmGone = "user:alice", "machine replaced", true
			if o.Confirm == nil {
				o.Confirm = yes
			}
			asked, err := LiftFence(context.Background(), c, o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if strings.Join(asked, ",") != strings.Join(tc.asked, ",") {
				t.Errorf("asked %v, want %v", asked, tc.asked)
			}
			list, _ := f.FencingV1alpha1().StorageFences().List(context.Background(), metav1.ListOptions{})
			for _, sf := range list.Items {
				want := strings.Contains(strings.Join(tc.asked, ","), sf.Name)
				if got := sf.Spec.Lift != nil; got != want {
					t.Errorf("%s has a lift request: %v, want %v", sf.Name, got, want)
				}
				if l := sf.Spec.Lift; l != nil && (l.RequestedBy != "user:alice" || l.Reason != "machine replaced" || !l.ConfirmedGone) {
					t.Errorf("%s lift request %+v", sf.Name, *l)
				}
			}
		})
	}
}

func TestWaitLifted(t *testing.T) {
	waiting := storageFence("dead")
	waiting.Spec.Lift = &fencingv1alpha1.FenceLiftRequest{RequestedBy: "user:alice"}
	waiting.Status.Conditions = []metav1.Condition{{Type: fencingv1alpha1.StorageFenceLifted, Status: metav1.ConditionFalse, Reason: "NodeNotReady", Message: "node dead is not Ready"}}
	c, _, _ := fakeClients(nil, []runtime.Object{waiting})
	err := WaitLifted(context.Background(), c, []string{"sf-dead"}, 10*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "sf-dead: NodeNotReady: node dead is not Ready") {
		t.Fatalf("err %v, want a timeout naming the reason", err)
	}
	if err := WaitLifted(context.Background(), c, []string{"sf-gone"}, time.Second); err != nil {
		t.Errorf("an object that is gone (no fence left): %v", err)
	}
}
