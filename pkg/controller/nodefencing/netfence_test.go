package nodefencing

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/kube/networkfence"
	"fenceline.io/fenceline/pkg/names"
)

// TestDecideNetworkFence is Decide for a policy with the storage fence
// method NetworkFence: made after the proof, before the out-of-service
// taint (which waits for it when storageFence is Required), and lifted
// last in a recovery.
func TestDecideNetworkFence(t *testing.T) {
	now := testobj.Epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	dead := testobj.UnknownSince(ago(time.Minute))
	ip := testobj.Address(v1.NodeInternalIP, "10.0.0.7")
	oos := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, ago(time.Hour))
	owner := testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-req-n1")
	back := []testobj.NodeOption{testobj.ReadySince(ago(time.Hour)), oos, owner, testobj.BootID("boot-2"), ip}
	pol := testobj.FencePolicy("p", testobj.NetworkFences("ceph"))
	bestEffort := testobj.FencePolicy("p", testobj.NetworkFences("ceph"), testobj.StorageFence(fencingv1alpha1.StorageFenceBestEffort))
	plain := testobj.FencePolicy("p")
	atFence := testobj.BootIDAtFence("boot-1")
	req := func(p fencingv1alpha1.FencingPhase) *fencingv1alpha1.FencingRequest {
		return testobj.FencingRequest("n1", testobj.InPhase(p), atFence)
	}
	name := networkfence.Name(req(fenced).Name, "ceph")
	classes := map[string]networkfence.Class{"ceph": {Name: "ceph", Provisioner: "rbd.csi.ceph.com"}}
	fence := func(state, result, msg string) NetworkFenceInput {
		return NetworkFenceInput{Served: true, Classes: classes, Fences: []networkfence.Fence{{Name: name, Class: "ceph", FenceState: state, Result: result, Message: msg}}}
	}
	none := NetworkFenceInput{Served: true, Classes: classes}
	confirmed := fence(networkfence.StateFenced, networkfence.ResultSucceeded, networkfence.FencedMessage)
	notServed := NetworkFenceInput{Problem: networkfence.ErrNotServed.Error()}

	type want struct {
		step    Step
		reason  string
		recheck time.Duration
	}
	tests := []struct {
		name string
		in   Input
		want want
	}{
		{"Fenced, none made: make it first", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: none},
			want{step: StepNetworkFence, reason: "Fenced"}},
		{"Fenced, BestEffort, none made: still made first", Input{Node: testobj.Node("n1", dead, ip), Policy: bestEffort, Request: req(fenced), NetworkFence: none},
			want{step: StepNetworkFence, reason: "Fenced"}},
		{"Fenced, made, not confirmed: the taint waits", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: fence(networkfence.StateFenced, "", "")},
			want{reason: ReasonNetworkFencePending}},
		{"Fenced, made, failed: the taint waits", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: fence(networkfence.StateFenced, networkfence.ResultFailed, "rpc error")},
			want{reason: ReasonNetworkFenceFailed}},
		{"Fenced, BestEffort, failed: the taint goes on", Input{Node: testobj.Node("n1", dead, ip), Policy: bestEffort, Request: req(fenced), NetworkFence: fence(networkfence.StateFenced, networkfence.ResultFailed, "rpc error")},
			want{step: StepOutOfService, reason: "Fenced"}},
		{"Fenced, confirmed: add the taint", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: confirmed},
			want{step: StepOutOfService, reason: "Fenced"}},
		{"Fenced, a Succeeded left from an unfence someone asked: not confirmed", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: fence(networkfence.StateUnfenced, networkfence.ResultSucceeded, networkfence.FencedMessage)},
			want{reason: ReasonNetworkFenceLifted}},
		{"Fenced, API not served: the taint waits, looked at again", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: notServed},
			want{reason: ReasonNetworkFenceUnavailable, recheck: notServedRecheck}},
		{"Fenced, class missing: the taint waits", Input{Node: testobj.Node("n1", dead, ip), Policy: pol, Request: req(fenced), NetworkFence: NetworkFenceInput{Served: true}},
			want{reason: ReasonNetworkFenceClassMissing}},
		{"Fenced, node without an address: the taint waits", Input{Node: testobj.Node("n1", dead), Policy: pol, Request: req(fenced), NetworkFence: none},
			want{reason: ReasonNoNodeAddresses}},
		{"Fenced, no method, API not served: the taint as ever", Input{Node: testobj.Node("n1", dead, ip), Policy: plain, Request: req(fenced), NetworkFence: notServed},
			want{step: StepOutOfService, reason: "Fenced"}},
		{"Recovering, all else holds, fence confirmed: unfence it first", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: confirmed},
			want{step: StepNetworkUnfence, reason: "Unfenced"}},
		{"Recovering, unfence asked, not confirmed (the fence's Succeeded left): wait", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: fence(networkfence.StateUnfenced, networkfence.ResultSucceeded, networkfence.FencedMessage)},
			want{reason: ReasonNetworkUnfencePending}},
		{"Recovering, unfence failed: wait", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: fence(networkfence.StateUnfenced, networkfence.ResultFailed, "rpc error")},
			want{reason: ReasonNetworkUnfenceFailed}},
		{"Recovering, unfence confirmed: delete it", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: fence(networkfence.StateUnfenced, networkfence.ResultSucceeded, networkfence.UnfencedMessage)},
			want{step: StepNetworkUnfence, reason: "Unfenced"}},
		{"Recovering, the policy dropped the method, a fence is left: still unfenced first", Input{Node: testobj.Node("n1", back...), Policy: plain, Request: req(recovering), NetworkFence: confirmed},
			want{step: StepNetworkUnfence, reason: "Unfenced"}},
		{"Recovering, none left: recover", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: none},
			want{step: StepRecover, reason: "Unfenced"}},
		{"Recovering, API not served: none can exist, recover", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: notServed},
			want{step: StepRecover, reason: "Unfenced"}},
		{"Recovering, fences unreadable: wait", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: NetworkFenceInput{Served: true, Problem: "timeout"}},
			want{reason: ReasonNetworkFenceUnavailable}},
		{"Recovering, a VolumeAttachment left: no unfence of the network fence yet", Input{Node: testobj.Node("n1", back...), Policy: pol, Request: req(recovering), NetworkFence: confirmed, VolumeAttachments: 1},
			want{reason: ReasonAttachmentsRemain}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			d := Decide(tc.in)
			if d.Step != tc.want.step || d.Reason != tc.want.reason || d.RecheckAfter != tc.want.recheck {
				t.Fatalf("Decide = %q %q recheck %v (%s), want %q %q recheck %v", d.Step, d.Reason, d.RecheckAfter, d.Why, tc.want.step, tc.want.reason, tc.want.recheck)
			}
			if d.Step == StepNetworkFence {
				if d.NetworkFence == nil || d.NetworkFence.Name != name || len(d.NetworkFence.CIDRs) != 1 || d.NetworkFence.CIDRs[0] != "10.0.0.7/32" || d.NetworkFence.Request != tc.in.Request.UID {
					t.Fatalf("NetworkFence = %+v", d.NetworkFence)
				}
			}
		})
	}
}
