package nodefencing

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
	"fenceline.io/fenceline/pkg/names"
)

// target reads the node's FenceTarget from the API server.
func (e *env) target(node string) *fencingv1alpha1.FenceTarget {
	e.t.Helper()
	t, err := e.Fencing.FencingV1alpha1().FenceTargets().Get(e.Ctx, node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

// answer writes the fence agent's answer to the power check asked on the
// node's FenceTarget, and waits for the caches.
func (e *env) answer(node string, state fencingv1alpha1.PowerState) {
	e.t.Helper()
	t := e.target(node)
	t.Status.PowerCheck = &fencingv1alpha1.FencePowerCheck{Token: t.Annotations[names.PowerCheckAnnotation], PowerState: state}
	if _, err := e.Fencing.FencingV1alpha1().FenceTargets().UpdateStatus(e.Ctx, t, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.Settle()
}

// TestSyncPowerCheck: n2 renews its Lease, then stops. It is not looked
// at for its power until it misses its renewal (12.5 s); then the fence
// agent is asked once for that renewal. An answer On changes nothing; Off
// makes it a candidate at once (PowerOffObserved), still Ready, and its
// request is admitted without the stale Lease's settling.
func TestSyncPowerCheck(t *testing.T) {
	now := testobj.Epoch
	extra := []runtime.Object{testobj.FenceTarget("n2")}
	for _, n := range []string{"n4", "n5"} {
		extra = append(extra, testobj.Node(n, testobj.ReadySince(now.Add(-time.Hour))), testobj.Lease(n, now))
	}
	e := newEnv(t, now, cluster(now, nil, extra...)...)
	lease, err := e.c.leases.Get("n2")
	if err != nil {
		t.Fatal(err)
	}
	token := detect.PowerCheckToken(lease)

	e.Clock.SetTime(now.Add(12 * time.Second))
	if after := e.sync("n2"); after != 500*time.Millisecond {
		t.Fatalf("recheck %s before the missed renewal, want 500ms (at 12.5 s)", after)
	}
	if ask := e.target("n2").Annotations[names.PowerCheckAnnotation]; ask != "" {
		t.Fatalf("a power check asked (%q) before the node missed its renewal", ask)
	}

	e.Clock.SetTime(now.Add(12500 * time.Millisecond))
	if after := e.sync("n2"); after != 7500*time.Millisecond {
		t.Fatalf("recheck %s after the ask, want 7.5s (when the Lease goes stale)", after)
	}
	asked := e.target("n2")
	if asked.Annotations[names.PowerCheckAnnotation] != token {
		t.Fatalf("power check asked %q, want the token of the missed renewal %q", asked.Annotations[names.PowerCheckAnnotation], token)
	}
	e.sync("n2")
	if again := e.target("n2"); again.ResourceVersion != asked.ResourceVersion {
		t.Fatalf("the power check was asked again for the same renewal: %+v", again.ObjectMeta)
	}

	e.answer("n2", fencingv1alpha1.PowerStateOn)
	e.sync("n2")
	if rs := e.requests("n2"); len(rs) != 0 {
		t.Fatalf("a request for a node whose power reads On: %+v", rs)
	}

	for _, n := range []string{"n3", "n4", "n5"} {
		e.renewLease(n) // they live on: n1 and n2 are the storm guard's only unhealthy nodes
	}
	e.answer("n2", fencingv1alpha1.PowerStateOff)
	e.sync("n2")
	r := e.wantPhase("n2", fencingv1alpha1.FencingPhasePending)
	if r.Spec.Reason != detect.ReasonPowerOffObserved {
		t.Fatalf("request reason %q, want %s", r.Spec.Reason, detect.ReasonPowerOffObserved)
	}
	// Off is a fence that already happened: nothing to settle, triaged
	// and admitted at once.
	e.sync("n2")
	e.wantPhase("n2", fencingv1alpha1.FencingPhaseFencing)
}

// TestPowerCheckAskedOverAProbe: the fence agent's probe rewrites the
// target's status between node-fencing's fresh read of the target and its
// ask, as it does every few seconds. The API server (emulated here) would
// refuse a write made on the version read; the read-only ask still lands,
// in the same sync.
func TestPowerCheckAskedOverAProbe(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil, testobj.FenceTarget("n2"))...)
	probed := false
	e.Fencing.PrependReactor("get", "fencetargets", func(clienttesting.Action) (bool, runtime.Object, error) {
		probed = true // the probe's status write lands right after this read
		return false, nil, nil
	})
	e.Fencing.PrependReactor("patch", "fencetargets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Metadata map[string]any `json:"metadata"`
		}
		if err := json.Unmarshal(a.(clienttesting.PatchAction).GetPatch(), &p); err != nil {
			return true, nil, err
		}
		// A patch naming a resourceVersion is made on the version read.
		if _, onVersion := p.Metadata["resourceVersion"]; probed && onVersion {
			return true, nil, apierrors.NewConflict(fencingv1alpha1.Resource("fencetargets"), "n2", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	lease, err := e.c.leases.Get("n2")
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.SetTime(now.Add(13 * time.Second))
	e.sync("n2")
	if !probed {
		t.Fatal("the ask was made without a fresh read of the target")
	}
	if got, want := e.target("n2").Annotations[names.PowerCheckAnnotation], detect.PowerCheckToken(lease); got != want {
		t.Fatalf("power check asked %q after a probe's write, want %q", got, want)
	}
}

// TestSyncPowerCheckAnswerOfAnEarlierSilence: an Off read for a renewal
// the node missed earlier counts for nothing once it renewed: a node that
// came back is never fenced on it, and its next missed renewal is a new
// ask.
func TestSyncPowerCheckAnswerOfAnEarlierSilence(t *testing.T) {
	now := testobj.Epoch
	e := newEnv(t, now, cluster(now, nil, testobj.FenceTarget("n2"))...)
	e.Clock.SetTime(now.Add(13 * time.Second))
	e.sync("n2")
	first := e.target("n2").Annotations[names.PowerCheckAnnotation]
	e.renewLease("n2")
	e.answer("n2", fencingv1alpha1.PowerStateOff) // late, about the earlier silence
	e.sync("n2")
	if rs := e.requests("n2"); len(rs) != 0 {
		t.Fatalf("a request on an Off read for a renewal the node made since: %+v", rs)
	}
	e.Clock.SetTime(now.Add(26 * time.Second))
	e.sync("n2")
	if second := e.target("n2").Annotations[names.PowerCheckAnnotation]; second == first || second == "" {
		t.Fatalf("the next missed renewal asked %q, want a new token (was %q)", second, first)
	}
	if rs := e.requests("n2"); len(rs) != 0 {
		t.Fatalf("a request before the new ask was answered: %+v", rs)
	}
}

// TestSyncPowerCheckNever: with powerCheck Never no ask is made and the
// node waits for its stale Lease.
func TestSyncPowerCheckNever(t *testing.T) {
	now := testobj.Epoch
	objs := cluster(now, nil, testobj.FenceTarget("n2"))
	objs[0] = testobj.FencePolicy("p", testobj.PowerCheck(fencingv1alpha1.PowerCheckNever))
	e := newEnv(t, now, objs...)
	e.Clock.SetTime(now.Add(13 * time.Second))
	if after := e.sync("n2"); after != 7*time.Second {
		t.Fatalf("recheck %s, want 7s (the stale Lease)", after)
	}
	if ask := e.target("n2").Annotations[names.PowerCheckAnnotation]; ask != "" {
		t.Fatalf("a power check asked (%q) under powerCheck Never", ask)
	}
}

// TestLeaseAppearsEnqueuesTheNode: a node Lease created or deleted
// brings its node back to its decision (a node seen without a Lease has
// no recheck); a Lease of another namespace, an update, or another object
// does not.
func TestLeaseAppearsEnqueuesTheNode(t *testing.T) {
	var got []string
	h := leaseAppears(func(n string) { got = append(got, n) })
	lease := testobj.Lease("n1", testobj.Epoch)
	other := testobj.Lease("n2", testobj.Epoch)
	other.Namespace = "kube-system"
	h.OnAdd(lease, false)
	h.OnAdd(other, false)
	h.OnUpdate(lease, lease)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "kube-node-lease/n1", Obj: lease})
	h.OnAdd(testobj.Node("n3"), false)
	if want := []string{"n1", "n1"}; !slices.Equal(got, want) {
		t.Fatalf("enqueued %v, want %v", got, want)
	}
}
