package fencingreq

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
)

func attempt(level int32, class string, result fencingv1alpha1.FenceAttemptResult, state string) fencingv1alpha1.FenceAttempt {
	return fencingv1alpha1.FenceAttempt{Level: level, FenceClass: class, Result: result, VerifiedPowerState: state}
}

func TestProvenLevel(t *testing.T) {
	levels := []fencingv1alpha1.FenceLevel{
		{Index: 1, FenceClassNames: []string{"bmc"}},
		{Index: 2, FenceClassNames: []string{"pdu-a", "pdu-b"}},
	}
	ok := fencingv1alpha1.FenceAttemptSucceeded
	tests := []struct {
		name     string
		attempts []fencingv1alpha1.FenceAttempt
		levels   []fencingv1alpha1.FenceLevel
		want     int32
		proven   bool
	}{
		{name: "no attempts", levels: levels},
		{name: "level 1 verified off", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", ok, "Off")}, levels: levels, want: 1, proven: true},
		{name: "succeeded without read-back is no proof", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", ok, "")}, levels: levels},
		{name: "read back on is no proof", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", ok, "On")}, levels: levels},
		{name: "off but failed result is no proof", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", fencingv1alpha1.FenceAttemptFailed, "Off")}, levels: levels},
		{name: "running attempt is no proof", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", "", "Off")}, levels: levels},
		{name: "one of two classes of a level is not enough", attempts: []fencingv1alpha1.FenceAttempt{attempt(2, "pdu-a", ok, "Off")}, levels: levels},
		{name: "both classes of level 2", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", fencingv1alpha1.FenceAttemptTimedOut, "On"), attempt(2, "pdu-a", ok, "Off"), attempt(2, "pdu-b", ok, "Off")}, levels: levels, want: 2, proven: true},
		{name: "a class proven at another level does not count", attempts: []fencingv1alpha1.FenceAttempt{attempt(2, "bmc", ok, "Off")}, levels: levels},
		{name: "class no longer in the policy does not count", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "old", ok, "Off")}, levels: levels},
		{name: "empty level proves nothing", attempts: nil, levels: []fencingv1alpha1.FenceLevel{{Index: 1}}},
		{name: "no levels (policy gone) proves nothing", attempts: []fencingv1alpha1.FenceAttempt{attempt(1, "bmc", ok, "Off")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, proven := ProvenLevel(tc.attempts, tc.levels)
			if got != tc.want || proven != tc.proven {
				t.Errorf("ProvenLevel = %d, %v; want %d, %v", got, proven, tc.want, tc.proven)
			}
		})
	}
}

func TestTerminal(t *testing.T) {
	for p, want := range map[fencingv1alpha1.FencingPhase]bool{
		"": false, fencingv1alpha1.FencingPhasePending: false, fencingv1alpha1.FencingPhaseTriaged: false,
		fencingv1alpha1.FencingPhaseFencing: false, fencingv1alpha1.FencingPhaseFenced: false, fencingv1alpha1.FencingPhaseRecovering: false,
		fencingv1alpha1.FencingPhaseRecovered: true, fencingv1alpha1.FencingPhaseFailed: true, fencingv1alpha1.FencingPhaseCancelled: true,
	} {
		if got := Terminal(p); got != want {
			t.Errorf("Terminal(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestRequestNaming(t *testing.T) {
	long := strings.Repeat("n", 240)
	for _, tc := range []struct {
		node, prefix, label string
	}{
		{node: "worker-1", prefix: "worker-1-", label: "worker-1"},
		// A node name longer than a label value (63) is hashed; the prefix
		// is cut so that the generated suffix fits in a name.
		{node: long, prefix: long[:200] + "-", label: "sha256-"},
		// A valid node name with dots is a valid label value.
		{node: "n1.example.com", prefix: "n1.example.com-", label: "n1.example.com"},
	} {
		if got := GenerateName(tc.node); got != tc.prefix {
			t.Errorf("GenerateName(%.20s...) = %.20s..., want %.20s...", tc.node, got, tc.prefix)
		}
		got := NodeLabelValue(tc.node)
		if !strings.HasPrefix(got, tc.label) || len(validation.IsValidLabelValue(got)) > 0 {
			t.Errorf("NodeLabelValue(%.20s...) = %q, want a valid label value starting %q", tc.node, got, tc.label)
		}
		if NodeLabelValue(tc.node) != got {
			t.Errorf("NodeLabelValue(%.20s...) is not stable", tc.node)
		}
	}
}
