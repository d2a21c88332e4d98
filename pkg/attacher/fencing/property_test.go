package fencing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// randomNode draws the VolumeAttachment's node: gone one time in eight,
// else Ready, NotReady, Unknown or without a Ready condition, with any of
// the cut-off taint keys under any effect and a FencingComplete condition
// True, False or absent.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(8) == 0 {
		return nil
	}
	t0 := testobj.Epoch
	opts := []testobj.NodeOption{[]testobj.NodeOption{
		testobj.ReadySince(t0), notReady, unknown, testobj.NoReadyCondition(),
	}[r.IntN(4)]}
	effects := []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectNoExecute, v1.TaintEffectPreferNoSchedule}
	for _, key := range []string{names.OutOfServiceTaint, names.QuarantineTaint, names.QuarantineTaint, names.ForceEvictionTaint} {
		if r.IntN(4) == 0 {
			opts = append(opts, testobj.TaintAt(key, effects[r.IntN(len(effects))], t0.Add(time.Duration(r.IntN(300))*time.Second)))
		}
	}
	switch r.IntN(4) {
	case 0:
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))
	case 1:
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, v1.ConditionFalse))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.VolumesInUse(propVolume))
	}
	return node(opts...)
}

// propVolume is the detached volume's name in node status in the property
// tests.
const propVolume v1.UniqueVolumeName = "kubernetes.io/csi/mock.fenceline.io^vol-1"

// describe prints what the decision reads of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{conditions %v taints %v}", n.Status.Conditions, n.Spec.Taints)
}

// randomInput draws every input of Decide: a fence record (one time in
// four, with any reason, the unreadable one included), the node, a
// CSIDriver that is missing, opted into safe detach or not, and the
// capability, freshness and blindness flags.
func randomInput(r *rand.Rand) Input {
	in := Input{Node: randomNode(r), DriverCanFence: r.IntN(2) == 0, Fresh: r.IntN(2) == 0, Blind: r.IntN(6) == 0}
	switch r.IntN(4) {
	case 0:
	case 1:
		in.Driver = csiDriver("")
	case 2:
		in.Driver = csiDriver("yes")
	default:
		in.Driver = csiDriver("true")
	}
	reasons := []cutoff.Reason{cutoff.ReasonOutOfService, cutoff.ReasonSafeDetach, cutoff.ReasonForceEviction, cutoff.ReasonFenced, cutoff.ReasonNodeGone, ReasonUnreadableRecord}
	if r.IntN(4) == 0 {
		in.Record = &Record{Reason: reasons[r.IntN(len(reasons))], NodeID: []string{"", "old-id", "node-a"}[r.IntN(3)]}
	}
	if r.IntN(4) == 0 {
		in.Intent = &Record{Reason: reasons[r.IntN(len(reasons))], By: cutoff.ByControllerPrefix + "podgc"}
	}
	if r.IntN(2) == 0 {
		in.Volume = propVolume
	}
	return in
}

// detachReason is the reason Decide must find for in (no record).
func detachReason(in Input) cutoff.Reason {
	if in.Blind {
		if in.Intent == nil {
			return cutoff.ReasonNone
		}
		return in.Intent.Reason
	}
	return cutoff.DetachReason(cutoff.DetachInput{Node: in.Node, SafeDetach: cutoff.SafeDetachEnabled(in.Driver), Intent: in.Intent, Volume: in.Volume})
}

// TestDecideProperties checks Decide over random inputs against the rules
// of its doc comment and docs/attacher.md: a recorded fence is sticky
// (fenced, or refused when the driver lost UNPUBLISH_FENCE; never plain,
// never a confirmation, never a second record); a node that is cut off,
// a gone Node included, is detached fenced and recorded first by a driver
// that can fence, unless the attacher is blind; a fence-capable driver
// never detaches plain on cached inputs; a quarantined node is never
// detached plain; the plain fallback of a driver that cannot fence is
// flagged Unsupported exactly when a human or a fencing controller
// vouched; a blind attacher without a record detaches plain, as upstream;
// refusals and fallbacks say why; a confirmation decided again on fresh
// inputs gives the plain detach it announced.
func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 2026))
	count := map[Action]int{}
	for i := range 20000 {
		in := randomInput(r)
		got := Decide(in)
		count[got.Action]++
		fail := func(why string) {
			t.Fatalf("case %d: %s\ninput record %+v node %s CSIDriver %v (safe detach %v) canFence %v fresh %v blind %v\ndecision %+v",
				i, why, in.Record, describe(in.Node), in.Driver != nil, cutoff.SafeDetachEnabled(in.Driver), in.DriverCanFence, in.Fresh, in.Blind, got)
		}
		reason := detachReason(in)
		confirmable := reason == cutoff.ReasonNone || reason == cutoff.ReasonInUse
		switch {
		case in.Record != nil:
			want := ActionRefuse
			if in.DriverCanFence {
				want = ActionFenced
			}
			if got.Action != want || got.Reason != in.Record.Reason || got.WriteRecord || got.Unsupported {
				fail(fmt.Sprintf("a recorded fence (%s) must give %s with the record's reason and no new record", in.Record.Reason, want))
			}
		case in.Blind && in.Intent == nil:
			if got.Action != ActionPlain || got.WriteRecord {
				fail("a blind attacher without a record or intent detaches as upstream")
			}
		case reason != cutoff.ReasonNone && in.DriverCanFence && !(confirmable && !in.Fresh):
			if got.Action != ActionFenced || !got.WriteRecord || got.Reason != reason {
				fail(fmt.Sprintf("node cut off (%s), driver can fence: want fenced, recorded first", reason))
			}
		case reason == cutoff.ReasonSafeDetach:
			if got.Action != ActionRefuse {
				fail("a quarantined node is detached plain by a driver that cannot fence")
			}
		}
		if got.Action == ActionPlain && in.DriverCanFence && !in.Blind && !in.Fresh {
			fail("plain detach by a fence-capable driver decided on cached inputs")
		}
		if got.Action == ActionPlain && in.DriverCanFence && (in.Record != nil || reason != cutoff.ReasonNone) {
			fail("plain detach although a fence is recorded or intended, or the node is cut off, and the driver fences")
		}
		if in.Intent != nil && in.Record == nil && in.DriverCanFence && got.Action != ActionFenced {
			fail("a controller's fence intent must give a fenced detach with a driver that fences")
		}
		if got.WriteRecord && (got.Action != ActionFenced || in.Record != nil || got.Reason == cutoff.ReasonNone) {
			fail("a record is written only for a new fenced decision with a reason")
		}
		if got.Unsupported != (got.Action == ActionPlain && got.Reason.Vouched()) {
			fail("Unsupported is for a plain fallback where someone vouched, and only for it")
		}
		if (got.Action == ActionRefuse || got.Unsupported) && got.Why == "" {
			fail("a refusal or a fallback without an explanation")
		}
		if got.Action == ActionConfirm {
			fresh := in
			fresh.Fresh = true
			again := Decide(fresh)
			switch {
			case reason == cutoff.ReasonInUse && (again.Action != ActionFenced || again.Reason != cutoff.ReasonInUse):
				fail(fmt.Sprintf("a volume still in use on the fresh node: %+v, want fenced (in-use)", again))
			case reason == cutoff.ReasonNone && (again.Action != ActionPlain || again.WriteRecord):
				fail(fmt.Sprintf("confirmed on the same inputs read fresh: %+v, want plain", again))
			}
		}
	}
	for _, a := range []Action{ActionPlain, ActionFenced, ActionRefuse, ActionConfirm} {
		if count[a] < 500 {
			t.Fatalf("action %s drawn only %d times: the generator does not exercise it (%v)", a, count[a], count)
		}
	}
}

// TestDetachNodeIDProperties checks DetachNodeID over random IDs against
// the rule "fence the node that was published": for a fenced detach a
// record's node ID wins, then an intent's, then the ID recorded at attach
// time, and the current CSINode's only when none is known (a re-installed
// node's new ID is never fenced while the old one is known); a plain detach
// targets the CSINode's ID first, as upstream. The answer is always one of
// the inputs, and "" is never returned without an error.
func TestDetachNodeIDProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 2026))
	ids := []string{"", "", "a", "b", "c"}
	record := func() *Record {
		if r.IntN(2) == 0 {
			return nil
		}
		return &Record{Reason: []cutoff.Reason{cutoff.ReasonFenced, ReasonUnreadableRecord}[r.IntN(2)], NodeID: ids[r.IntN(len(ids))]}
	}
	for i := range 5000 {
		rec, intent, fenced := record(), record(), r.IntN(2) == 0
		attached, current := ids[r.IntN(len(ids))], ids[r.IntN(len(ids))]
		got, err := DetachNodeID(fenced, rec, intent, attached, current)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nfenced %v record %+v intent %+v attached %q csiNode %q: got %q, %v", i, why, fenced, rec, intent, attached, current, got, err)
		}
		var want string
		switch {
		case !fenced && current != "":
			want = current
		case !fenced:
			want = attached
		case rec != nil && rec.NodeID != "":
			want = rec.NodeID
		case intent != nil && intent.NodeID != "":
			want = intent.NodeID
		case attached != "":
			want = attached
		default:
			want = current
		}
		switch {
		case want == "" && err == nil:
			fail("no ID known, want an error")
		case want != "" && (err != nil || got != want):
			fail(fmt.Sprintf("want %q", want))
		case err != nil && got != "":
			fail("an ID with an error")
		}
	}
}

// TestRecordOfProperties checks that a fence record survives its
// annotation (NewRecord, Encode, RecordOf give it back, whatever the
// characters of its node ID), and that any annotation value, however
// edited, still reads as a fence: RecordOf never returns nil for a
// VolumeAttachment that carries the annotation, and a value it cannot
// read gives ReasonUnreadableRecord with an error.
func TestRecordOfProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 2026))
	alphabet := []rune(`ab-_.:/"\{}[],@ é` + "\x00\n")
	str := func() string {
		s := make([]rune, r.IntN(12))
		for j := range s {
			s[j] = alphabet[r.IntN(len(alphabet))]
		}
		return string(s)
	}
	for i := range 5000 {
		reason := []cutoff.Reason{cutoff.ReasonOutOfService, cutoff.ReasonSafeDetach, cutoff.ReasonNodeGone, cutoff.Reason(str())}[r.IntN(4)]
		rec := NewRecord(reason, str(), testobj.Epoch.Add(time.Duration(r.Int64N(1e12))))
		va := testobj.VA("va", "d", "pv", "n1")
		va.Annotations = map[string]string{names.FenceRecordAnnotation: rec.Encode()}
		got, err := RecordOf(va)
		switch {
		case rec.Reason == "":
			// A record without a reason is no record, but still a fence.
			if got == nil || got.Reason != ReasonUnreadableRecord || err == nil {
				t.Fatalf("case %d: RecordOf(Encode(%+v)) = %+v, %v; want an unreadable record and an error", i, rec, got, err)
			}
		case got == nil || err != nil || *got != rec:
			t.Fatalf("case %d: RecordOf(Encode(%+v)) = %+v, %v", i, rec, got, err)
		}

		raw := edit(r, rec.Encode(), str)
		va.Annotations[names.FenceRecordAnnotation] = raw
		got, err = RecordOf(va)
		if got == nil || got.Reason == "" {
			t.Fatalf("case %d: annotation %q read as %+v, %v: an edited annotation must still count as a fence", i, raw, got, err)
		}
		if err != nil && got.Reason != ReasonUnreadableRecord {
			t.Fatalf("case %d: annotation %q read as %+v, %v", i, raw, got, err)
		}
	}
	if got, err := RecordOf(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"other": "x"}}}); got != nil || err != nil {
		t.Errorf("no annotation: %+v, %v; want nil, nil", got, err)
	}
}

// edit changes an encoded record as a human might: truncates it, replaces
// it, or splices random text into it.
func edit(r *rand.Rand, s string, str func() string) string {
	switch r.IntN(4) {
	case 0:
		return s[:r.IntN(len(s)+1)]
	case 1:
		return str()
	case 2:
		at := r.IntN(len(s) + 1)
		return s[:at] + str() + s[at:]
	}
	return s
}
