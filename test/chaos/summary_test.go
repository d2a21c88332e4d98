package chaos

import (
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/mock-driver/tgt"
	"fenceline.io/fenceline/test/world"
)

// TestSummaryAdversarial: the summary's adversarial line counts the skews,
// the third party's edits and the lies, and is absent from a run of seeds
// that drew none.
func TestSummaryAdversarial(t *testing.T) {
	old := []Result{{Plan: Draw(5)}, {Plan: Draw(1005)}}
	if s := Summary(old, 0, 0, time.Minute); strings.Contains(s, "adversarial") {
		t.Errorf("a run without adversarial draws reports them:\n%s", s)
	}
	results := []Result{
		{Plan: Plan{Recovery: SafeDetach, Skews: []Skew{{Of: SkewHealthyNode, By: -nodeClockSkew}, {Of: SkewAttacher, By: nodeClockSkew}}}},
		{Plan: Plan{Recovery: Operator, Faults: []Fault{{Kind: EditFenceAnnotations}, {Kind: APILatency, Component: ControllerComponent}}}, Edits: EditOutcome{Removed: 2, Restored: 1, WithEvent: 1, Detached: 1}},
		{Plan: Plan{Recovery: NodeFencing, LyingBMC: true}, LiesBelieved: 1, LiesCaught: 1},
	}
	got := Summary(results, 0, 0, time.Minute)
	for _, want := range []string{
		"skewed clocks 0 failed node, 1 healthy node, 1 attacher; API latency 0 attacher, 1 controller",
		"1 third-party edits: 2 VolumeAttachments edited, 1 written back (1 with the Event), 1 detached first, 0 not judged",
		"1 lying BMCs: 1 nodes fenced on the lie, 1 caught",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// TestSummaryAttacherHandovers: the summary's attacher line counts the
// episodes with two attacher replicas, their leader fail-overs and how long
// the successors took, and is absent when no episode ran two.
func TestSummaryAttacherHandovers(t *testing.T) {
	if s := Summary([]Result{{Plan: Draw(5)}, {Plan: Draw(2005)}}, 0, 0, time.Minute); strings.Contains(s, "attacher replicas") {
		t.Errorf("a run without attacher replicas reports them:\n%s", s)
	}
	failover := Fault{Kind: AttacherLeaderFailover}
	results := []Result{
		{Plan: Plan{Recovery: SafeDetach, AttacherReplicas: 2, Faults: []Fault{failover, failover}},
			Handovers: AttacherHandovers{TakenOver: []time.Duration{4 * time.Second, 6 * time.Second}}},
		{Plan: Plan{Recovery: Operator, AttacherReplicas: 2, Faults: []Fault{failover}}, Handovers: AttacherHandovers{Missed: 1}},
		{Plan: Plan{Recovery: NodeFencing, AttacherReplicas: 2}},
		{Plan: Plan{Recovery: NodeFencing}},
	}
	want := "attacher replicas: 3 episodes with two, 3 leader fail-overs: taken over in 2 (median 6s, max 6s), not within 1m0s in 1"
	if got := Summary(results, 0, 0, time.Minute); !strings.Contains(got, want) {
		t.Errorf("summary lacks %q:\n%s", want, got)
	}
}

// TestSummaryTwoDrivers: the summary's line on two drivers counts the
// episodes that ran two, those under safe-detach, and the faults aimed at
// each driver, and is absent when no episode ran two.
func TestSummaryTwoDrivers(t *testing.T) {
	if s := Summary([]Result{{Plan: Draw(5)}, {Plan: Draw(3005)}}, 0, 0, time.Minute); strings.Contains(s, "two drivers") {
		t.Errorf("a run of one driver reports two:\n%s", s)
	}
	results := []Result{
		{Plan: Plan{Recovery: SafeDetach, TwoDrivers: true, Faults: []Fault{{Kind: KillDriver, Driver: world.SecondDriverName}, {Kind: KillController}}}},
		{Plan: Plan{Recovery: Operator, TwoDrivers: true, Faults: []Fault{{Kind: AttacherDown, Driver: world.DriverName}, {Kind: KillAttacher, Driver: world.SecondDriverName}}}},
		{Plan: Plan{Recovery: NodeFencing}},
	}
	want := "two drivers: 2 episodes, 1 of them under safe-detach (the other driver's sets left for the restore); driver and attacher faults: 1 at mock, 2 at mock2"
	if got := Summary(results, 0, 0, time.Minute); !strings.Contains(got, want) {
		t.Errorf("summary lacks %q:\n%s", want, got)
	}
}

// TestSummaryTgt: the summary's line on plans on a real target counts them
// by fence method and adds up what the byte checker read, and is absent
// when none ran there.
func TestSummaryTgt(t *testing.T) {
	if s := Summary([]Result{{Plan: Draw(5)}, {Plan: Draw(4005)}}, 0, 0, time.Minute); strings.Contains(s, "real iSCSI target") {
		t.Errorf("a run on the memory backend reports a real target:\n%s", s)
	}
	results := []Result{
		{Plan: Plan{Tgt: tgt.MethodACLSessions}, Bytes: BytesJudged{LUNs: 2, Sent: 100, Acked: 90, Fences: 1}},
		{Plan: Plan{Tgt: tgt.MethodPR}, Bytes: BytesJudged{LUNs: 1, Sent: 10, Acked: 10}},
		{Plan: Plan{}},
	}
	want := "real iSCSI target: 2 episodes (acl+sessions 1, pr 1); 3 LUNs read back, 110 stamped writes (100 acknowledged) judged on their bytes against 1 fences"
	if got := Summary(results, 0, 0, time.Minute); !strings.Contains(got, want) {
		t.Errorf("summary lacks %q:\n%s", want, got)
	}
}
