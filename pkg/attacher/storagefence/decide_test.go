package storagefence

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/fence/fencev1"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

const driver = "mock.fenceline.io"

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func volumes(ids ...string) *fencev1.Fence { return &fencev1.Fence{NodeId: "id-a", VolumeIds: ids} }

func inUseOpt(handles ...string) testobj.NodeOption {
	var vols []v1.UniqueVolumeName
	for _, h := range handles {
		vols = append(vols, nodeutil.CSIUniqueVolumeName(driver, h))
	}
	return testobj.VolumesInUse(vols...)
}

func TestDecideLift(t *testing.T) {
	req := &fencingv1alpha1.FenceLiftRequest{RequestedBy: "alice"}
	confirmed := &fencingv1alpha1.FenceLiftRequest{RequestedBy: "alice", ConfirmedGone: true}
	ready := func(opts ...testobj.NodeOption) *v1.Node {
		return testobj.Node("node-a", append([]testobj.NodeOption{testobj.ReadySince(t0)}, opts...)...)
	}
	fenced := []*fencev1.Fence{volumes("vol-1", "vol-2")}
	nodeWide := []*fencev1.Fence{{NodeId: "id-a", AllVolumes: true}}
	tests := []struct {
		name   string
		in     LiftInput
		lift   bool
		reason string
	}{
		{name: "no request", in: LiftInput{CanLift: true, NodeName: "node-a", Node: ready(), Fences: fenced}, reason: ReasonNotRequested},
		{name: "driver cannot lift", in: LiftInput{Request: req, NodeName: "node-a", Node: ready(), Fences: fenced}, reason: ReasonLiftUnsupported},
		{name: "nothing fenced any more", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready()}, reason: ReasonNoFences},
		{name: "Ready, nothing cutting it off, fenced volumes unused: lift", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(inUseOpt("vol-9")), Fences: fenced}, lift: true, reason: ReasonNodeSafe},
		{name: "not Ready", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: testobj.Node("node-a", testobj.UnknownSince(t0)), Fences: fenced}, reason: ReasonNodeNotReady},
		{name: "no Ready condition", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: testobj.Node("node-a", testobj.NoReadyCondition()), Fences: fenced}, reason: ReasonNodeNotReady},
		{name: "Ready but out of service", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "Ready but quarantined", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "Ready but force-evicted", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "Ready but fencing required", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Taint(names.FencingRequiredTaint, v1.TaintEffectNoSchedule)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "Ready but fencing triaged", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Taint(names.FencingTriagedTaint, v1.TaintEffectPreferNoSchedule)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "Ready but FencingComplete", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)), Fences: fenced}, reason: ReasonNodeCutOff},
		{name: "a fenced volume still in use", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(inUseOpt("vol-2")), Fences: fenced}, reason: ReasonVolumesInUse},
		{name: "node-wide fence, another volume of the driver in use", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(inUseOpt("vol-9")), Fences: nodeWide}, reason: ReasonVolumesInUse},
		{name: "node-wide fence, only another driver's volume in use: lift", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(testobj.VolumesInUse(nodeutil.CSIUniqueVolumeName("other.csi", "vol-9"))), Fences: nodeWide}, lift: true, reason: ReasonNodeSafe},
		{name: "a detach from the node pending", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Node: ready(), Fences: fenced, Detaching: []string{"csi-1"}}, reason: ReasonDetachPending},
		{name: "Node gone, not confirmed", in: LiftInput{Request: req, CanLift: true, NodeName: "node-a", Fences: fenced}, reason: ReasonNodeUnknown},
		{name: "node ID named by no CSINode, not confirmed", in: LiftInput{Request: req, CanLift: true, Fences: fenced}, reason: ReasonNodeUnknown},
		{name: "Node gone, confirmed: lift", in: LiftInput{Request: confirmed, CanLift: true, NodeName: "node-a", Fences: fenced}, lift: true, reason: ReasonConfirmedGone},
		{name: "Node gone, confirmed, a detach pending", in: LiftInput{Request: confirmed, CanLift: true, NodeName: "node-a", Fences: fenced, Detaching: []string{"csi-1"}}, reason: ReasonDetachPending},
		{name: "confirmation does not override a Node that is there and not Ready", in: LiftInput{Request: confirmed, CanLift: true, NodeName: "node-a", Node: testobj.Node("node-a", testobj.UnknownSince(t0)), Fences: fenced}, reason: ReasonNodeNotReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Driver = driver
			d := DecideLift(tc.in)
			if d.Lift != tc.lift || d.Reason != tc.reason {
				t.Fatalf("DecideLift = %+v, want lift=%v reason %s", d, tc.lift, tc.reason)
			}
			if d.Message == "" {
				t.Error("no message")
			}
		})
	}
}

func TestReport(t *testing.T) {
	at := timestamppb.New(t0)
	many := make([]string, fencingv1alpha1.MaxReportedVolumes+3)
	for i := range many {
		many[i] = "vol-" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	fences := []*fencev1.Fence{
		{NodeId: "id-a", VolumeIds: []string{"vol-1"}, FencedAt: at, Details: "acl removed"},
		{NodeId: "id-a", VolumeIds: many},
	}
	r := Report("node-a", fences)
	if r.NodeName != "node-a" || r.AllVolumes || len(r.Fences) != 2 || r.Truncated != 0 {
		t.Fatalf("report %+v", r)
	}
	if r.VolumeCount != int32(len(many)+1) {
		t.Errorf("VolumeCount %d, want %d", r.VolumeCount, len(many)+1)
	}
	if got := r.Fences[1]; len(got.VolumeIDs) != fencingv1alpha1.MaxReportedVolumes || got.MoreVolumes != 3 {
		t.Errorf("second fence kept %d volume IDs and %d more, want %d and 3", len(got.VolumeIDs), got.MoreVolumes, fencingv1alpha1.MaxReportedVolumes)
	}
	if f := r.Fences[0]; f.FencedAt == nil || !f.FencedAt.Time.Equal(t0) || f.Details != "acl removed" {
		t.Errorf("first fence %+v", f)
	}

	var lots []*fencev1.Fence
	for range fencingv1alpha1.MaxReportedFences + 2 {
		lots = append(lots, &fencev1.Fence{NodeId: "id-a", AllVolumes: true})
	}
	r = Report("", lots)
	if len(r.Fences) != fencingv1alpha1.MaxReportedFences || r.Truncated != 2 || !r.AllVolumes {
		t.Errorf("kept %d fences, truncated %d, all volumes %v", len(r.Fences), r.Truncated, r.AllVolumes)
	}
}

func TestObjectName(t *testing.T) {
	a, b := ObjectName(driver, "id-a"), ObjectName(driver, "id-b")
	if a == b || a != ObjectName(driver, "id-a") || ObjectName("other", "id-a") == a {
		t.Fatalf("names not one per driver and node ID: %s %s", a, b)
	}
	if len(a) > 63 || !strings.HasPrefix(a, "sf-") {
		t.Errorf("name %q", a)
	}
}
