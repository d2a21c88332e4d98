package kubectlplugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/nodefencing"
	fencingfake "fenceline.io/fenceline/pkg/generated/clientset/versioned/fake"
	"fenceline.io/fenceline/pkg/names"
)

// unfenceWorld is a node "n" fenced for its request in phase, under a
// policy whose recovery.unfence is unfence ("" or "Manual"); boot is the
// node's boot ID ("" for none), back says it returned Ready a minute ago,
// and vas VolumeAttachments are left for it.
func unfenceWorld(phase fencingv1alpha1.FencingPhase, unfence, boot string, back bool, vas int) ([]runtime.Object, []runtime.Object) {
	opts := []testobj.NodeOption{testobj.BootID(boot)}
	if back {
		opts = append(opts, testobj.ReadySince(now.Add(-time.Minute)))
	}
	opts = append(opts, testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, t0),
		testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, t0))
	kube := []runtime.Object{fencedNode("n", opts...)}
	for i := range vas {
		kube = append(kube, testobj.VA("va-"+string(rune('a'+i)), driver, "pv", "n"))
	}
	policy := testobj.FencePolicy("workers")
	policy.Spec.Recovery.Unfence = unfence
	return kube, []runtime.Object{policy, testobj.FenceClass("bmc"), fencingRequest("n", phase)}
}

// failedWorld is a node "n" Ready for a minute with boot ID boot, still
// carrying the taints and conditions of a request that Failed (request
// false: it was deleted since); its boot ID at fence time is atFence.
func failedWorld(boot, atFence string, request bool) ([]runtime.Object, []runtime.Object) {
	node := testobj.Node("n", testobj.ReadySince(now.Add(-time.Minute)), testobj.BootID(boot),
		testobj.TaintAt(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule, t0),
		testobj.TaintAt(names.FencingRequiredTaint, v1.TaintEffectNoSchedule, t0),
		testobj.ConditionSince(names.FencingTriagedCondition, v1.ConditionTrue, t0),
		testobj.ConditionSince(names.FencingRequiredCondition, v1.ConditionTrue, t0))
	fenceObjs := []runtime.Object{testobj.FencePolicy("workers"), testobj.FenceClass("bmc")}
	if request {
		r := fencingRequest("n", fencingv1alpha1.FencingPhaseFailed)
		r.Status.BootIDAtFence, r.Status.Conditions = atFence, nil
		fenceObjs = append(fenceObjs, r)
	}
	return []runtime.Object{node}, fenceObjs
}

// writes are the write actions the plugin sent to a fake clientset.
func writes(f interface{ Actions() []k8stesting.Action }) []string {
	var out []string
	for _, a := range f.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			w := a.GetVerb() + " " + a.GetResource().Resource
			if a.GetSubresource() != "" {
				w += "/" + a.GetSubresource()
			}
			out = append(out, w)
		}
	}
	return out
}

// unfenceCase is one run of Unfence: the error it must return (nothing
// written then), or the one write it must make, of the ask on the object.
type unfenceCase struct {
	name     string
	verified string
	confirm  bool
	wantErr  string
	// wantWrite is "patch fencingrequests" or "patch nodes" ("" with an error).
	wantWrite string
	// wantVerified is the verification the ask must carry.
	wantVerified string
}

func runUnfence(t *testing.T, tc unfenceCase, kube, fenceObjs []runtime.Object) {
	t.Helper()
	c, k, f := fakeClients(kube, fenceObjs)
	a, err := Unfence(context.Background(), c, UnfenceOptions{Node: "n", Requester: "user:alice", Verified: tc.verified, Confirm: answer(tc.confirm), Now: now})
	got := append(writes(k), writes(f)...)
	if tc.wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Fatalf("Unfence error = %v, want one containing %q", err, tc.wantErr)
		}
		if len(got) > 0 {
			t.Errorf("a refused unfence wrote %v", got)
		}
		return
	}
	if err != nil {
		t.Fatalf("Unfence: %v", err)
	}
	if len(got) != 1 || got[0] != tc.wantWrite {
		t.Fatalf("writes = %v, want only %q: the plugin asks, node-fencing writes", got, tc.wantWrite)
	}
	annotations := askedOn(t, k, f, tc.wantWrite)
	if annotations[names.UnfenceAnnotation] != "user:alice" || annotations[names.UnfenceVerifiedAnnotation] != tc.wantVerified {
		t.Errorf("ask annotations = %v, want %s=user:alice and verified %q", annotations, names.UnfenceAnnotation, tc.wantVerified)
	}
	if a.Asked == "" || a.Watch == "" || a.Doing == "" {
		t.Errorf("ask = %+v, want what was asked and how to follow it", a)
	}
}

// askedOn reads the annotations of the object the ask was written on.
func askedOn(t *testing.T, k *kubefake.Clientset, f *fencingfake.Clientset, write string) map[string]string {
	t.Helper()
	ctx := context.Background()
	if write == "patch nodes" {
		n, err := k.CoreV1().Nodes().Get(ctx, "n", getOpts)
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations
	}
	l, err := f.FencingV1alpha1().FencingRequests().List(ctx, listOpts)
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("listing requests: %v, %d", err, len(l.Items))
	}
	return l.Items[0].Annotations
}

func TestUnfenceOpenRequest(t *testing.T) {
	for _, tc := range []struct {
		unfenceCase
		phase  fencingv1alpha1.FencingPhase
		policy string
		boot   string
		back   bool
		vas    int
	}{
		{unfenceCase: unfenceCase{name: "a request not admitted yet: ask to cancel", confirm: true, wantWrite: "patch fencingrequests"}, phase: fencingv1alpha1.FencingPhaseTriaged, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "declined", wantErr: ErrAborted.Error()}, phase: fencingv1alpha1.FencingPhaseTriaged, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "a fence in progress is never stopped", confirm: true, wantErr: "never stopped"}, phase: fencingv1alpha1.FencingPhaseFencing, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "policy unfences on a new boot, node not back", confirm: true, wantErr: "cannot be unfenced now (FencingRequest n-abcde, Fenced (NodeNotReady))"}, phase: fencingv1alpha1.FencingPhaseFenced, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "policy unfences on a new boot, node back: node-fencing does it", confirm: true, wantErr: "node-fencing unfences node n by itself (Recover)"}, phase: fencingv1alpha1.FencingPhaseRecovering, boot: "boot-2", back: true},
		{unfenceCase: unfenceCase{name: "manual unfence, node not back: the ask waits for it", confirm: true, wantWrite: "patch fencingrequests"}, phase: fencingv1alpha1.FencingPhaseFenced, policy: "Manual", boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "manual unfence, back with a new boot: ask", confirm: true, wantWrite: "patch fencingrequests"}, phase: fencingv1alpha1.FencingPhaseRecovering, policy: "Manual", boot: "boot-2", back: true},
		{unfenceCase: unfenceCase{name: "manual unfence, volume attachments left: the ask waits for them", confirm: true, wantWrite: "patch fencingrequests"}, phase: fencingv1alpha1.FencingPhaseRecovering, policy: "Manual", boot: "boot-2", back: true, vas: 1},
		{unfenceCase: unfenceCase{name: "manual unfence, Ready with the fenced boot ID again: refused", confirm: true, verified: "Rebooted", wantErr: "(FencingRequest n-abcde, Recovering (SameBootID))"}, phase: fencingv1alpha1.FencingPhaseRecovering, policy: "Manual", boot: "boot-1", back: true},
		{unfenceCase: unfenceCase{name: "no boot ID now, nothing verified: refused", confirm: true, wantErr: "(BootIDUnknown)"}, phase: fencingv1alpha1.FencingPhaseFenced, boot: "", back: true},
		{unfenceCase: unfenceCase{name: "no boot ID now, verified rebooted: ask", confirm: true, verified: "Rebooted", wantWrite: "patch fencingrequests", wantVerified: "Rebooted"}, phase: fencingv1alpha1.FencingPhaseFenced, boot: "", back: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, fenceObjs := unfenceWorld(tc.phase, tc.policy, tc.boot, tc.back, tc.vas)
			runUnfence(t, tc.unfenceCase, kube, fenceObjs)
		})
	}
}

func TestUnfenceLeftMarks(t *testing.T) {
	for _, tc := range []struct {
		unfenceCase
		boot, atFence string
		request       bool
	}{
		{unfenceCase: unfenceCase{name: "Failed request, back with a new boot ID: ask on the request", confirm: true, wantWrite: "patch fencingrequests"}, boot: "boot-2", atFence: "boot-1", request: true},
		{unfenceCase: unfenceCase{name: "Failed request, back with the same boot ID: refused, whatever is stated", confirm: true, verified: "Off", wantErr: "marks cannot be cleared (SameBootID)"}, boot: "boot-1", atFence: "boot-1", request: true},
		{unfenceCase: unfenceCase{name: "Failed request without a boot ID, verified off: ask on the request", confirm: true, verified: "Off", wantWrite: "patch fencingrequests", wantVerified: "Off"}, boot: "boot-1", request: true},
		{unfenceCase: unfenceCase{name: "request deleted, marks left, verified rebooted: ask on the node", confirm: true, verified: "Rebooted", wantWrite: "patch nodes", wantVerified: "Rebooted"}, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "request deleted, marks left, nothing verified: refused", confirm: true, wantErr: "marks cannot be cleared (BootIDUnknown)"}, boot: "boot-1"},
		{unfenceCase: unfenceCase{name: "declined", verified: "Rebooted", wantErr: ErrAborted.Error()}, boot: "boot-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, fenceObjs := failedWorld(tc.boot, tc.atFence, tc.request)
			runUnfence(t, tc.unfenceCase, kube, fenceObjs)
		})
	}
}

func TestUnfenceNothingToUnfence(t *testing.T) {
	kube, fenceObjs := world()
	c, _, _ := fakeClients(kube, fenceObjs)
	_, err := Unfence(context.Background(), c, UnfenceOptions{Node: "live", Confirm: answer(true), Now: now})
	if err == nil || !strings.Contains(err.Error(), "nothing to unfence") {
		t.Errorf("Unfence of a node without a request or marks: %v, want nothing to unfence", err)
	}
	if errors.Is(err, ErrAborted) {
		t.Error("a refusal is not an abort")
	}
}

// TestWaitForTheController checks the wait on an ask: done once
// node-fencing carried it out, a clear timeout naming the decision and how
// to follow the ask otherwise.
func TestWaitForTheController(t *testing.T) {
	kube, fenceObjs := unfenceWorld(fencingv1alpha1.FencingPhaseTriaged, "", "boot-1", false, 0)
	c, _, f := fakeClients(kube, fenceObjs)
	a, err := Unfence(context.Background(), c, UnfenceOptions{Node: "n", Requester: "user:alice", Confirm: answer(true), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return now }
	err = Wait(context.Background(), c, a, 50*time.Millisecond, clock)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "Cancel (UnfenceRequested)") || !strings.Contains(err.Error(), "kubectl get fencingrequest n-abcde -w") {
		t.Errorf("Wait before node-fencing acted = %v, want a timeout naming its decision (Cancel) and the watch command", err)
	}
	// node-fencing cancels the request.
	r, err := f.FencingV1alpha1().FencingRequests().Get(context.Background(), "n-abcde", getOpts)
	if err != nil {
		t.Fatal(err)
	}
	r.Status.Phase = fencingv1alpha1.FencingPhaseCancelled
	if _, err := f.FencingV1alpha1().FencingRequests().UpdateStatus(context.Background(), r, updateOpts); err != nil {
		t.Fatal(err)
	}
	if err := Wait(context.Background(), c, a, time.Minute, clock); err != nil {
		t.Errorf("Wait after node-fencing cancelled the request = %v, want done", err)
	}
}

func TestParseVerified(t *testing.T) {
	for in, want := range map[string]string{"": "", "off": nodefencing.VerifiedOff, "Rebooted": nodefencing.VerifiedRebooted} {
		if got, err := ParseVerified(in); err != nil || got != want {
			t.Errorf("ParseVerified(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseVerified("yes"); err == nil {
		t.Error("ParseVerified(yes) accepted")
	}
}

var (
	getOpts    = metav1.GetOptions{}
	listOpts   = metav1.ListOptions{}
	updateOpts = metav1.UpdateOptions{}
)
