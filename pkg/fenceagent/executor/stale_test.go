package executor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

var requestsGVR = fencingv1alpha1.SchemeGroupVersion.WithResource("fencingrequests")

// versions is the fixture's API server with optimistic concurrency for
// FencingRequests, which the fake lacks: a write is taken only over the
// version the server holds, and gets the next resourceVersion.
type versions struct {
	mu sync.Mutex
	// refused counts the writes refused with a conflict; over are the
	// resourceVersions the accepted writes were made over, in order.
	refused int
	over    []string
}

// versioned installs versions on f. The request must carry a
// resourceVersion (atVersion).
func (f *fixture) versioned() *versions {
	v := &versions{}
	f.fencing.PrependReactor("update", "fencingrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.UpdateAction).GetObject().(*fencingv1alpha1.FencingRequest).DeepCopy()
		stored, err := f.fencing.Tracker().Get(requestsGVR, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		held := stored.(*fencingv1alpha1.FencingRequest).ResourceVersion
		if obj.ResourceVersion != held {
			v.refused++
			return true, nil, apierrors.NewConflict(requestsGVR.GroupResource(), obj.Name,
				fmt.Errorf("written over resourceVersion %s, the object is at %s", obj.ResourceVersion, held))
		}
		v.over = append(v.over, held)
		obj.ResourceVersion = nextVersion(held)
		return true, obj, f.fencing.Tracker().Update(requestsGVR, obj, obj.Namespace)
	})
	return v
}

func (v *versions) counts() (refused int, over []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refused, append([]string(nil), v.over...)
}

func nextVersion(rv string) string {
	n, _ := strconv.Atoi(rv)
	return strconv.Itoa(n + 1)
}

func atVersion(rv string) func(*fencingv1alpha1.FencingRequest) {
	return func(r *fencingv1alpha1.FencingRequest) { r.ResourceVersion = rv }
}

// staleCache writes change on the API server and then puts the version
// the cache held back into it: the cache is one version behind.
func (f *fixture) staleCache(t *testing.T, change func(*fencingv1alpha1.FencingRequest)) {
	t.Helper()
	cached, err := f.ctrl.requests.Get(reqName)
	if err != nil {
		t.Fatal(err)
	}
	newer := cached.DeepCopy()
	change(newer)
	if newer, err = f.fencing.FencingV1alpha1().FencingRequests().UpdateStatus(f.ctx, newer, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := f.ctrl.requests.Get(reqName)
		return err == nil && r.ResourceVersion == newer.ResourceVersion, nil
	}); err != nil {
		t.Fatalf("the cache never saw resourceVersion %s: %v", newer.ResourceVersion, err)
	}
	if err := f.ctrl.cfg.Requests.Informer().GetIndexer().Update(cached); err != nil {
		t.Fatal(err)
	}
}

// writeAfterEachRead makes another writer change the request on the API
// server right after each read of it is answered.
func (f *fixture) writeAfterEachRead() {
	f.fencing.PrependReactor("get", "fencingrequests", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := f.fencing.Tracker().Get(requestsGVR, "", action.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		written := obj.DeepCopyObject().(*fencingv1alpha1.FencingRequest)
		written.ResourceVersion = nextVersion(written.ResourceVersion)
		return true, obj, f.fencing.Tracker().Update(requestsGVR, written, "")
	})
}

// lastDecision is the action of the last decision logged.
func (f *fixture) lastDecision() string {
	lines := strings.Split(f.logs(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], " Decided ") {
			if _, after, ok := strings.Cut(lines[i], `action="`); ok {
				return strings.SplitN(after, `"`, 2)[0]
			}
		}
	}
	return ""
}

// A round is decided on the cached request and its first write is made
// on that version alone: a current cache costs no read, a stale one a
// refused write, no power action, and a decision on the fresh read.
func TestRoundDecidedOnTheCache(t *testing.T) {
	failedNow := func(r *fencingv1alpha1.FencingRequest) {
		r.Status.Attempts = append(r.Status.Attempts, ended(1, "bmc", fencingv1alpha1.FenceAttemptFailed, "On", time.Now()))
		r.Status.FailedRounds = 1
	}
	readmitted := func(r *fencingv1alpha1.FencingRequest) { r.Status.Conditions[0].Message = "admitted again" }
	notRequired := func(r *fencingv1alpha1.FencingRequest) { r.Status.Conditions[0].Status = metav1.ConditionFalse }
	for _, tc := range []struct {
		name string
		// server changes the request on the API server only, nil for a
		// current cache; writeAfterRead has another writer change it after
		// each read.
		server         func(*fencingv1alpha1.FencingRequest)
		writeAfterRead bool
		wantGets       int
		wantRefused    int
		// wantOver is the resourceVersion the attempt's start was written
		// over, "" for no attempt.
		wantOver     string
		wantOffs     int
		wantAttempts int
		wantDecision Action
		wantErr      error
	}{
		{name: "current cache: no read before the attempt's start",
			wantOver: "1", wantOffs: 1, wantAttempts: 1, wantDecision: ActionRunRound},
		{name: "stale cache: a failed round whose backoff is not over",
			server: failedNow, wantGets: 1, wantRefused: 1, wantAttempts: 1, wantDecision: ActionRetryAfter},
		{name: "stale cache: no longer Required",
			server: notRequired, wantGets: 1, wantRefused: 1, wantDecision: ActionNone},
		{name: "stale cache: a newer version, still to fence",
			server: readmitted, wantGets: 1, wantRefused: 1, wantOver: "2", wantOffs: 1, wantAttempts: 1, wantDecision: ActionRunRound},
		{name: "written again after the fresh read: no round, requeued",
			server: readmitted, writeAfterRead: true, wantGets: 1, wantRefused: 2, wantDecision: ActionRunRound, wantErr: errStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, levels("bmc"), fencingRequest(atVersion("1")), node1())
			v := f.versioned()
			if tc.server != nil {
				f.staleCache(t, tc.server)
			}
			if tc.writeAfterRead {
				f.writeAfterEachRead()
			}
			_, before := v.counts()
			f.devices["bmc"].onOff = func() {
				r, err := f.fencing.Tracker().Get(requestsGVR, "", reqName)
				if err != nil || unfinished(r.(*fencingv1alpha1.FencingRequest).Status.Attempts) != 1 {
					t.Errorf("Off sent with no running attempt recorded: %v", err)
				}
			}
			f.fencing.ClearActions()
			err := f.ctrl.Sync(f.ctx, reqName)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("sync = %v, want %v", err, tc.wantErr)
			}
			gets := 0
			for _, a := range f.fencing.Actions() {
				if a.Matches("get", "fencingrequests") {
					gets++
				}
			}
			refused, over := v.counts()
			over = over[len(before):]
			offs, _ := f.devices["bmc"].counts()
			stored, err := f.fencing.FencingV1alpha1().FencingRequests().Get(f.ctx, reqName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if gets != tc.wantGets || refused != tc.wantRefused || offs != tc.wantOffs || len(stored.Status.Attempts) != tc.wantAttempts {
				t.Errorf("%d reads, %d refused writes, %d Off, %d attempts; want %d, %d, %d, %d",
					gets, refused, offs, len(stored.Status.Attempts), tc.wantGets, tc.wantRefused, tc.wantOffs, tc.wantAttempts)
			}
			if tc.wantOver == "" && len(over) > 0 || tc.wantOver != "" && (len(over) == 0 || over[0] != tc.wantOver) {
				t.Errorf("accepted writes over resourceVersions %v, want the attempt's start over %q", over, tc.wantOver)
			}
			if got := f.lastDecision(); got != string(tc.wantDecision) {
				t.Errorf("last decision %q, want %q", got, tc.wantDecision)
			}
		})
	}
}

// Every write of a round after its first starts from the round's last
// write: a round through two levels on a current cache makes no write the
// API server refuses, and each is made over the version the one before it
// left.
func TestRoundWritesFollowEachOther(t *testing.T) {
	f := newFixture(t, levels("bmc", "pdu-a"), fencingRequest(atVersion("1")), node1())
	f.devices["bmc"].stayOn = true
	v := f.versioned()
	if err := f.ctrl.Sync(f.ctx, reqName); err != nil {
		t.Fatal(err)
	}
	refused, over := v.counts()
	// The start and the end of each of the two attempts.
	if want := []string{"1", "2", "3", "4"}; refused != 0 || fmt.Sprint(over) != fmt.Sprint(want) {
		t.Errorf("%d refused writes, accepted over resourceVersions %v; want 0 and %v", refused, over, want)
	}
}
