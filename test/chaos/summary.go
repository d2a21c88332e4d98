package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Summary is the report `make chaos` ends with: episodes, violations,
// harness failures, wall time, and the spread of failover and convergence
// times by recovery path.
func Summary(results []Result, violations, broken int, wall time.Duration) string {
	var b strings.Builder
	upstream := 0
	for _, r := range results {
		if len(r.Upstream) > 0 {
			upstream++
		}
	}
	fmt.Fprintf(&b, "chaos: %d episodes in %s, %d with violations, %d harness failures, %d where kube-controller-manager or KWOK deleted a replacement by name\n",
		len(results), wall.Round(time.Second), violations, broken, upstream)
	by := map[Recovery][]Result{}
	for _, r := range results {
		by[r.Plan.Recovery] = append(by[r.Plan.Recovery], r)
	}
	for _, rec := range []Recovery{NodeFencing, Operator, SafeDetach} {
		rs := by[rec]
		if len(rs) == 0 {
			continue
		}
		var fo, conv []time.Duration
		moved := 0
		for _, r := range rs {
			if r.Failover > 0 {
				fo = append(fo, r.Failover)
				moved++
			}
			if r.Converged > 0 {
				conv = append(conv, r.Converged)
			}
		}
		fmt.Fprintf(&b, "  %-12s %3d episodes, moved before the restore in %d: failover median %s max %s; converged median %s max %s\n",
			rec, len(rs), moved, median(fo), maxOf(fo), median(conv), maxOf(conv))
	}
	if line := adversarialSummary(results); line != "" {
		b.WriteString(line)
	}
	b.WriteString(handoverSummary(results))
	b.WriteString(twoDriverSummary(results))
	b.WriteString(tgtSummary(results))
	return b.String()
}

// adversarialSummary is the summary's line on the adversarial draws
// (AdversarialSeeds), empty when no episode drew one: how many episodes
// ran with skewed clocks, a third party's edits and a lying BMC, and what
// became of the edits and the lies.
func adversarialSummary(results []Result) string {
	skews := map[SkewTarget]int{}
	var edits EditOutcome
	edited, lying, believed, caught := 0, 0, 0, 0
	latency := map[Component]int{}
	for _, r := range results {
		for _, s := range r.Plan.Skews {
			skews[s.Of]++
		}
		for _, f := range r.Plan.Faults {
			switch f.Kind {
			case EditFenceAnnotations:
				edited++
			case APILatency:
				latency[f.Component]++
			}
		}
		if r.Plan.LyingBMC {
			lying++
		}
		edits.Removed += r.Edits.Removed
		edits.Restored += r.Edits.Restored
		edits.WithEvent += r.Edits.WithEvent
		edits.Detached += r.Edits.Detached
		edits.Inconclusive += r.Edits.Inconclusive
		believed += r.LiesBelieved
		caught += r.LiesCaught
	}
	if len(skews) == 0 && edited == 0 && lying == 0 && len(latency) == 0 {
		return ""
	}
	return fmt.Sprintf("  adversarial: skewed clocks %d failed node, %d healthy node, %d attacher; API latency %d attacher, %d controller; %d third-party edits: %d VolumeAttachments edited, %d written back (%d with the Event), %d detached first, %d not judged (attacher restarted); %d lying BMCs: %d nodes fenced on the lie, %d caught\n",
		skews[SkewFailedNode], skews[SkewHealthyNode], skews[SkewAttacher], latency[AttacherComponent], latency[ControllerComponent],
		edited, edits.Removed, edits.Restored, edits.WithEvent, edits.Detached, edits.Inconclusive, lying, believed, caught)
}

func median(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(100 * time.Millisecond).String()
}

func maxOf(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return slices.Max(ds).Round(100 * time.Millisecond).String()
}
