package executor

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
)

// A status write starts from the request this agent holds, without a
// read; a conflict (someone wrote since) reads it fresh and changes that.
func TestUpdateStatusStartsFromWhatItHolds(t *testing.T) {
	held := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: "7"}}
	for _, tc := range []struct {
		name              string
		conflicts         int
		wantGets, wantPut int
	}{
		{"nothing changed since", 0, 0, 1},
		{"someone wrote since", 1, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fencingfake.NewSimpleClientset(held.DeepCopy())
			gets, puts, conflicts := 0, 0, tc.conflicts
			client.PrependReactor("get", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
				gets++
				return false, nil, nil
			})
			client.PrependReactor("update", "fencingrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
				puts++
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "fencingrequests"}, "r", nil)
				}
				return false, nil, nil
			})
			c := &Controller{cfg: Config{Client: client}}
			var seen []string
			out, err := c.updateStatus(context.Background(), "r", held, func(r *fencingv1alpha1.FencingRequest) (bool, error) {
				seen = append(seen, r.ResourceVersion)
				r.Status.FailedRounds++
				return true, nil
			})
			if err != nil || out.Status.FailedRounds != 1 {
				t.Fatalf("updateStatus = %+v, %v", out, err)
			}
			if gets != tc.wantGets || puts != tc.wantPut {
				t.Errorf("%d reads and %d writes, want %d and %d", gets, puts, tc.wantGets, tc.wantPut)
			}
			if seen[0] != "7" || held.Status.FailedRounds != 0 {
				t.Errorf("the first try did not start from the held request, or changed it in place: saw %v, held %+v", seen, held.Status)
			}
		})
	}
}
