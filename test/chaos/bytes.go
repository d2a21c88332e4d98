package chaos

import (
	"fmt"
)

// The rules of an episode on a real iSCSI target (Plan.Tgt), judged on
// the LUNs' bytes.
const (
	// RuleBytesTwoWriters: a block on a LUN shows a fenced node's write
	// acknowledged after the fence, or a fenced node's write over another
	// node's acknowledged one, or an acknowledged write lost
	// (world.CheckBytes, iscsi.Ledger.Check).
	RuleBytesTwoWriters = "bytes-two-writers"
	// RuleBytesUnread: a LUN written to could not be read back after the
	// episode converged (attached nowhere, or the target refused the
	// checker): its bytes went unjudged.
	RuleBytesUnread = "bytes-unread"
)

// checkBytes reads every LUN the stand-ins wrote to and judges it. A LUN
// that cannot be read is a finding only once the episode converged (every
// workload running, so every volume attached); before that the
// convergence finding already says what is wrong. judged says what was
// read, for the report.
func (e *episode) checkBytes(converged bool) (out []Finding, b BytesJudged, judged string) {
	vs, err := e.w.CheckBytes(e.ctx)
	if err != nil {
		if converged {
			out = append(out, Finding{Rule: RuleBytesUnread, Detail: err.Error()})
		}
		return out, b, fmt.Sprintf(", bytes not read (%v)", err)
	}
	b.LUNs = len(vs)
	for _, v := range vs {
		b.Sent, b.Acked, b.Fences = b.Sent+v.Sent, b.Acked+v.Acked, b.Fences+v.Fences
		for _, bad := range v.Violations {
			out = append(out, Finding{Rule: RuleBytesTwoWriters, Detail: fmt.Sprintf("LUN of %s: %s", v.Volume, bad)})
		}
	}
	return out, b, fmt.Sprintf(", %d stamped block writes (%d acknowledged) against %d fences judged on the bytes of %d LUNs", b.Sent, b.Acked, b.Fences, b.LUNs)
}

// BytesJudged is what the byte checker read after an episode on a real
// target: LUNs read, stamped writes sent and acknowledged, fences.
type BytesJudged struct {
	LUNs, Sent, Acked, Fences int
}

// tgtSummary is the summary's line on plans on a real target, empty when
// none ran: how many, by fence method, and what was judged on the bytes.
func tgtSummary(results []Result) string {
	methods := map[string]int{}
	var total BytesJudged
	n := 0
	for _, r := range results {
		if r.Plan.Tgt == "" {
			continue
		}
		n++
		methods[string(r.Plan.Tgt)]++
		total.LUNs, total.Sent, total.Acked, total.Fences = total.LUNs+r.Bytes.LUNs, total.Sent+r.Bytes.Sent, total.Acked+r.Bytes.Acked, total.Fences+r.Bytes.Fences
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("  real iSCSI target: %d episodes (acl+sessions %d, pr %d); %d LUNs read back, %d stamped writes (%d acknowledged) judged on their bytes against %d fences\n",
		n, methods["acl+sessions"], methods["pr"], total.LUNs, total.Sent, total.Acked, total.Fences)
}
