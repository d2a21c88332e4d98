package chaos

import (
	"strings"
	"testing"
	"time"
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
