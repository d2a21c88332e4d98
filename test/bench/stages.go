package bench

import (
	"fmt"
	"slices"
)

// Milestone is one point of a failover, timed from its start (the
// out-of-service taint), with the components whose work ends there.
type Milestone struct {
	Name    string
	Seconds float64
	Owner   string
}

// Stage is the time between two successive milestones, charged to the
// later one's owner.
type Stage struct {
	From, To string
	Owner    string
	Seconds  float64
	// Share is Seconds over the whole failover, the last milestone's time.
	Share float64
}

// Stages orders the milestones by time and returns the increments between
// them. A failover is a pipeline per pod, so its "last X" milestones
// overlap rather than follow each other: ordering them by time and
// charging each increment to the milestone that ends it shows where the
// critical path waits, and the increments add up to the whole. Milestones
// with a negative time (not measured) are left out.
func Stages(start string, ms []Milestone) []Stage {
	ms = slices.DeleteFunc(slices.Clone(ms), func(m Milestone) bool { return m.Seconds < 0 })
	slices.SortStableFunc(ms, func(a, b Milestone) int {
		switch {
		case a.Seconds < b.Seconds:
			return -1
		case a.Seconds > b.Seconds:
			return 1
		}
		return 0
	})
	if len(ms) == 0 {
		return nil
	}
	total := ms[len(ms)-1].Seconds
	out := make([]Stage, 0, len(ms))
	from, at := start, 0.0
	for _, m := range ms {
		s := Stage{From: from, To: m.Name, Owner: m.Owner, Seconds: m.Seconds - at}
		if total > 0 {
			s.Share = s.Seconds / total
		}
		out = append(out, s)
		from, at = m.Name, m.Seconds
	}
	return out
}

// StageTable renders stages with their share, and the total per owner.
func StageTable(stages []Stage) string {
	t := Table{Header: []string{"stage", "ends with", "s", "share"}}
	byOwner := map[string]float64{}
	var owners []string
	var total float64
	for _, s := range stages {
		t.AddRow(s.From+" -> "+s.To, s.Owner, fmt.Sprintf("%.2f", s.Seconds), fmt.Sprintf("%.0f %%", 100*s.Share))
		if _, ok := byOwner[s.Owner]; !ok {
			owners = append(owners, s.Owner)
		}
		byOwner[s.Owner] += s.Seconds
		total += s.Seconds
	}
	for _, o := range owners {
		share := 0.0
		if total > 0 {
			share = byOwner[o] / total
		}
		t.AddRow("total", o, fmt.Sprintf("%.2f", byOwner[o]), fmt.Sprintf("%.0f %%", 100*share))
	}
	return t.String()
}
