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
	return b.String()
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
