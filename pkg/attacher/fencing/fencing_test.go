package fencing

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// node builds the test node: Ready=True unless an option says otherwise.
func node(opts ...testobj.NodeOption) *v1.Node { return testobj.Node("node-1", opts...) }

var (
	notReady   = testobj.NotReadySince(testobj.Epoch)
	unknown    = testobj.UnknownSince(testobj.Epoch)
	quarantine = testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule)
)

func csiDriver(safe string) *storagev1.CSIDriver {
	var ann map[string]string
	if safe != "" {
		ann = map[string]string{names.SafeDetachAnnotation: safe}
	}
	return testobj.CSIDriver("mock.fenceline.io", ann)
}

func TestDecide(t *testing.T) {
	healthy := node()
	oos := node(unknown, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute))
	quarantined := node(notReady, quarantine)
	evicting := node(unknown, testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute))
	fenced := node(unknown, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))
	rec := &Record{Reason: cutoff.ReasonOutOfService, NodeID: "old-id"}
	intent := &Record{Version: cutoff.RecordVersion, Reason: cutoff.ReasonSafeDetach, By: cutoff.ByControllerPrefix + "quarantine"}
	const vol v1.UniqueVolumeName = "kubernetes.io/csi/mock.fenceline.io^vol-1"
	tests := []struct {
		name string
		in   Input
		want Decision
	}{
		// Rule 3: a plain detach by a fence-capable driver is confirmed on fresh data.
		{"healthy node, cached, driver can fence: confirm", Input{Node: healthy, DriverCanFence: true}, Decision{Action: ActionConfirm}},
		{"healthy node, fresh, driver can fence: plain", Input{Node: healthy, DriverCanFence: true, Fresh: true}, Decision{Action: ActionPlain}},
		{"healthy node, driver cannot fence: plain without confirming", Input{Node: healthy}, Decision{Action: ActionPlain}},
		{"NotReady without taints, fresh: plain", Input{Node: node(unknown), DriverCanFence: true, Fresh: true}, Decision{Action: ActionPlain}},
		// Rule 1: reasons are recorded before the first fenced unpublish.
		{"out-of-service, cached: fenced and recorded", Input{Node: oos, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonOutOfService, WriteRecord: true}},
		{"force-eviction", Input{Node: evicting, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonForceEviction, WriteRecord: true}},
		{"FencingComplete", Input{Node: fenced, DriverCanFence: true, Fresh: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonFenced, WriteRecord: true}},
		{"safe-detach", Input{Node: quarantined, Driver: csiDriver("true"), DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach, WriteRecord: true}},
		{"quarantine, driver not opted in, fresh: plain", Input{Node: quarantined, Driver: csiDriver(""), DriverCanFence: true, Fresh: true}, Decision{Action: ActionPlain}},
		// Rule 1: a record is sticky whatever the node and driver look like now.
		{"record, node Ready again", Input{Record: rec, Node: healthy, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonOutOfService}},
		{"record, node gone", Input{Record: rec, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonOutOfService}},
		{"record, CSIDriver gone, fresh", Input{Record: &Record{Reason: cutoff.ReasonSafeDetach}, Node: healthy, DriverCanFence: true, Fresh: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach}},
		{"unreadable record still fences", Input{Record: &Record{Reason: ReasonUnreadableRecord}, Node: healthy, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: ReasonUnreadableRecord}},
		{"record, driver lost the capability: refuse", Input{Record: rec, Node: oos}, Decision{Action: ActionRefuse, Reason: cutoff.ReasonOutOfService}},
		// Rule 2: a missing Node is not a reason to be less safe.
		{"node gone, driver can fence", Input{DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonNodeGone, WriteRecord: true}},
		{"node gone, driver cannot fence: plain as upstream", Input{}, Decision{Action: ActionPlain, Reason: cutoff.ReasonNodeGone}},
		// Rule 5: safe-detach never detaches plain; vouched reasons keep upstream's fallback.
		{"safe-detach, driver cannot fence: refuse", Input{Node: quarantined, Driver: csiDriver("true")}, Decision{Action: ActionRefuse, Reason: cutoff.ReasonSafeDetach}},
		{"out-of-service, driver cannot fence: plain with warning", Input{Node: oos}, Decision{Action: ActionPlain, Reason: cutoff.ReasonOutOfService, Unsupported: true}},
		{"force-eviction, driver cannot fence: plain with warning", Input{Node: evicting}, Decision{Action: ActionPlain, Reason: cutoff.ReasonForceEviction, Unsupported: true}},
		{"fenced node, driver cannot fence: plain with warning", Input{Node: fenced}, Decision{Action: ActionPlain, Reason: cutoff.ReasonFenced, Unsupported: true}},
		// Blind (RBAC denies Nodes or CSIDrivers): as upstream, but a record still fences.
		{"blind, node unknown, driver can fence: plain", Input{Blind: true, DriverCanFence: true}, Decision{Action: ActionPlain}},
		{"blind, cached, driver can fence: plain without confirming", Input{Blind: true, DriverCanFence: true, Node: healthy}, Decision{Action: ActionPlain}},
		{"blind, record: still fenced", Input{Blind: true, Record: rec, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonOutOfService}},
		{"blind, record, driver lost the capability: refuse", Input{Blind: true, Record: rec}, Decision{Action: ActionRefuse, Reason: cutoff.ReasonOutOfService}},
		// Intent before cause: a controller's intent is a reason, whatever the node looks like now.
		{"intent, node Ready again, cached", Input{Intent: intent, Node: healthy, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach, WriteRecord: true}},
		{"intent, node Ready again, fresh", Input{Intent: intent, Node: healthy, DriverCanFence: true, Fresh: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach, WriteRecord: true}},
		{"intent, blind: still fenced", Input{Intent: intent, Blind: true, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach, WriteRecord: true}},
		{"unreadable intent: still fenced", Input{Intent: &Record{Reason: ReasonUnreadableRecord}, Node: healthy, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: ReasonUnreadableRecord, WriteRecord: true}},
		{"safe-detach intent, driver cannot fence: refuse", Input{Intent: intent, Node: healthy}, Decision{Action: ActionRefuse, Reason: cutoff.ReasonSafeDetach}},
		{"out-of-service intent, driver cannot fence: plain with warning", Input{Intent: &Record{Reason: cutoff.ReasonOutOfService}, Node: healthy}, Decision{Action: ActionPlain, Reason: cutoff.ReasonOutOfService, Unsupported: true}},
		{"record before intent", Input{Record: rec, Intent: intent, Node: healthy, DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonOutOfService}},
		// A reason lasts as long as its taint.
		{"quarantine on a Ready node, opted in", Input{Node: node(quarantine), Driver: csiDriver("true"), DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonSafeDetach, WriteRecord: true}},
		{"force-eviction on a Ready node", Input{Node: node(testobj.Taint(names.ForceEvictionTaint, v1.TaintEffectNoExecute)), DriverCanFence: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonForceEviction, WriteRecord: true}},
		// A detach of a volume still in use is a forced detach.
		{"volume in use, cached: confirm (the cache may lag behind the unmount)", Input{Node: node(testobj.VolumesInUse(vol)), Volume: vol, DriverCanFence: true}, Decision{Action: ActionConfirm}},
		{"volume in use, fresh: fenced", Input{Node: node(testobj.VolumesInUse(vol)), Volume: vol, DriverCanFence: true, Fresh: true}, Decision{Action: ActionFenced, Reason: cutoff.ReasonInUse, WriteRecord: true}},
		{"volume in use, driver cannot fence: plain as upstream", Input{Node: node(testobj.VolumesInUse(vol)), Volume: vol}, Decision{Action: ActionPlain, Reason: cutoff.ReasonInUse}},
		{"another volume in use: confirm", Input{Node: node(testobj.VolumesInUse("kubernetes.io/csi/d^other")), Volume: vol, DriverCanFence: true}, Decision{Action: ActionConfirm}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in)
			if tc.want.Action == ActionRefuse || tc.want.Unsupported {
				if got.Why == "" {
					t.Errorf("Decide() gave no explanation for %s", got.Action)
				}
			}
			got.Why = ""
			if got != tc.want {
				t.Errorf("Decide() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDecideNeverPlainWithRecord checks the sticky rule over every node shape
// and input combination: once recorded, never plain.
func TestDecideNeverPlainWithRecord(t *testing.T) {
	nodes := []*v1.Node{nil, node(), node(notReady), node(notReady, quarantine)}
	drivers := []*storagev1.CSIDriver{nil, csiDriver(""), csiDriver("true")}
	for _, node := range nodes {
		for _, d := range drivers {
			for _, canFence := range []bool{false, true} {
				for _, fresh := range []bool{false, true} {
					for _, blind := range []bool{false, true} {
						got := Decide(Input{Record: &Record{Reason: cutoff.ReasonSafeDetach, NodeID: "x"}, Node: node, Driver: d, DriverCanFence: canFence, Fresh: fresh, Blind: blind})
						if got.Action == ActionPlain || got.Action == ActionConfirm || got.WriteRecord {
							t.Errorf("node %v driver %v canFence %v fresh %v blind %v: %+v", node != nil, d != nil, canFence, fresh, blind, got)
						}
					}
				}
			}
		}
	}
}

func TestBlindness(t *testing.T) {
	for _, tc := range []struct {
		name              string
		nodes, csiDrivers []string
		want              bool
	}{
		{"both readable", nil, nil, false},
		{"nodes denied", []string{"list nodes"}, nil, true},
		{"csidrivers denied: a quarantine would look like a healthy node", nil, []string{"watch csidrivers.storage.k8s.io"}, true},
		{"both denied", []string{"list nodes"}, []string{"list csidrivers.storage.k8s.io"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blind, why := Blindness(tc.nodes, tc.csiDrivers)
			if blind != tc.want {
				t.Fatalf("Blindness() = %v, want %v", blind, tc.want)
			}
			for _, r := range append(tc.nodes, tc.csiDrivers...) {
				if !strings.Contains(why, r) {
					t.Errorf("why %q does not name %q", why, r)
				}
			}
		})
	}
}

func TestNeedsFreshDriver(t *testing.T) {
	tests := []struct {
		name string
		node *v1.Node
		want bool
	}{
		{"healthy", node(), false},
		{"quarantined and NotReady", node(notReady, quarantine), true},
		{"quarantined but Ready: the taint still counts for its detaches", node(quarantine), true},
		{"out-of-service and quarantined", node(notReady, testobj.Taint(names.OutOfServiceTaint, v1.TaintEffectNoExecute), quarantine), false},
		{"gone", nil, false},
	}
	for _, tc := range tests {
		if got := NeedsFreshDriver(tc.node); got != tc.want {
			t.Errorf("%s: NeedsFreshDriver() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDetachNodeID(t *testing.T) {
	rec := &Record{Reason: cutoff.ReasonFenced, NodeID: "rec"}
	intent := &Record{Reason: cutoff.ReasonOutOfService, NodeID: "intent"}
	tests := []struct {
		name              string
		fenced            bool
		rec, intent       *Record
		attached, csiNode string
		want              string
		wantErr           bool
	}{
		{"fenced: record wins", true, rec, intent, "att", "cur", "rec", false},
		{"fenced: intent before the attach-time ID", true, nil, intent, "att", "cur", "intent", false},
		{"fenced: attach-time ID wins over a re-installed node's new ID", true, nil, nil, "old", "new", "old", false},
		{"fenced: unreadable record falls back to the attach-time ID", true, &Record{Reason: ReasonUnreadableRecord}, &Record{Reason: cutoff.ReasonSafeDetach}, "old", "new", "old", false},
		{"fenced: CSINode when nothing was recorded", true, nil, nil, "", "cur", "cur", false},
		{"plain: the CSINode's ID, as upstream", false, nil, nil, "old", "new", "new", false},
		{"plain: the attach-time ID when the CSINode has none", false, nil, nil, "old", "", "old", false},
		{"plain: records are not read", false, rec, intent, "", "cur", "cur", false},
		{"nothing known", true, nil, nil, "", "", "", true},
		{"nothing known, plain", false, rec, nil, "", "", "", true},
	}
	for _, tc := range tests {
		got, err := DetachNodeID(tc.fenced, tc.rec, tc.intent, tc.attached, tc.csiNode)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: DetachNodeID() = %q, %v; want %q, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := NewRecord(cutoff.ReasonSafeDetach, "node-a-id", now)
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{names.FenceRecordAnnotation: r.Encode()}}}
	got, err := RecordOf(va)
	if err != nil || got == nil || *got != r {
		t.Fatalf("RecordOf(Encode(%+v)) = %+v, %v", r, got, err)
	}
	if got, err := RecordOf(&storagev1.VolumeAttachment{}); got != nil || err != nil {
		t.Errorf("no annotation: %+v, %v; want nil, nil", got, err)
	}
	for _, raw := range []string{"", "true", `{"nodeID":"x"}`, `{"reason":`} {
		va.Annotations[names.FenceRecordAnnotation] = raw
		got, err := RecordOf(va)
		if err == nil || got == nil || got.Reason != ReasonUnreadableRecord {
			t.Errorf("RecordOf(%q) = %+v, %v; want an unreadable record and an error", raw, got, err)
		}
	}
}
