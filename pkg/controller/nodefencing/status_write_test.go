package nodefencing

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
)

// A status write starts from the request the controller holds, without a
// read; a conflict reads it fresh, and so does a change that finds
// nothing to write on the held copy (a lagging copy never skips a write).
func TestUpdateStatusStartsFromWhatItHolds(t *testing.T) {
	held := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u", ResourceVersion: "7"}}
	for _, tc := range []struct {
		name              string
		conflicts         int
		heldHasIt         bool // the held copy already has the change
		wantGets, wantPut int
	}{
		{"nothing changed since", 0, false, 0, 1},
		{"someone wrote since", 1, false, 1, 2},
		{"the held copy says there is nothing to write", 0, true, 1, 1},
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
			c := &Controller{cfg: Config{Client: client}, now: time.Now}
			r := held.DeepCopy()
			if tc.heldHasIt {
				r.Status.FailedRounds = 1
			}
			err := c.updateStatus(context.Background(), r, func(s *fencingv1alpha1.FencingRequestStatus, _ metav1.Time) bool {
				if s.FailedRounds == 1 {
					return false
				}
				s.FailedRounds = 1
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if gets != tc.wantGets || puts != tc.wantPut {
				t.Errorf("%d reads and %d writes, want %d and %d", gets, puts, tc.wantGets, tc.wantPut)
			}
			got, err := client.FencingV1alpha1().FencingRequests().Get(context.Background(), "r", metav1.GetOptions{})
			if err != nil || got.Status.FailedRounds != 1 {
				t.Errorf("stored status %+v, %v; want the change written", got.Status, err)
			}
		})
	}
}

// A fresh decision that names another step than the cached one brings the
// node back at once; one that waits keeps its recheck.
func TestAfterChangedDecision(t *testing.T) {
	for _, tc := range []struct {
		name string
		fd   Decision
		want time.Duration
	}{
		{"the Lease went stale between the cached and the fresh decision", Decision{Step: StepCreate}, changedStepRequeue},
		{"another step, with a recheck of its own", Decision{Step: StepAdmit, RecheckAfter: time.Minute}, changedStepRequeue},
		{"nothing to do now, recheck later", Decision{RecheckAfter: 12 * time.Second}, 12 * time.Second},
		{"nothing to do", Decision{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := afterChangedDecision(tc.fd); got != tc.want {
				t.Errorf("afterChangedDecision(%+v) = %v, want %v", tc.fd, got, tc.want)
			}
		})
	}
}

// The marks of replaced versions: a cached request at a replaced version
// is stale; any other version drops the marks.
func TestSuperseded(t *testing.T) {
	var s superseded
	r := func(rv string) *fencingv1alpha1.FencingRequest {
		return &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: rv}}
	}
	if s.stale(r("1")) || s.stale(nil) {
		t.Fatal("a request without marks is stale")
	}
	s.mark("u", "1", "2", "")
	if !s.stale(r("1")) || !s.stale(r("2")) {
		t.Fatal("a replaced version is not stale")
	}
	if s.stale(r("3")) {
		t.Fatal("the written version is stale")
	}
	if s.stale(r("1")) {
		t.Error("the marks outlived the cache catching up")
	}
}

// A status write marks the versions it replaced, so that the next sync on a
// cache that lags does not take the same step again.
func TestStatusWriteMarksReplacedVersions(t *testing.T) {
	cached := &fencingv1alpha1.FencingRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u", ResourceVersion: "7"}}
	client := fencingfake.NewSimpleClientset(cached.DeepCopy())
	client.PrependReactor("update", "fencingrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().DeepCopyObject().(*fencingv1alpha1.FencingRequest)
		obj.ResourceVersion = "8" // what the API server answers
		return true, obj, nil
	})
	c := &Controller{cfg: Config{Client: client}, now: time.Now}
	if err := c.updateStatus(context.Background(), cached, func(s *fencingv1alpha1.FencingRequestStatus, _ metav1.Time) bool {
		s.FailedRounds = 1
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !c.written.stale(cached) {
		t.Error("the cached version the write replaced is not marked")
	}
}
