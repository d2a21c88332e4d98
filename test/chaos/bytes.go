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
func (e *episode) checkBytes(converged bool) (out []Finding, judged string) {
	vs, err := e.w.CheckBytes(e.ctx)
	if err != nil {
		if converged {
			out = append(out, Finding{Rule: RuleBytesUnread, Detail: err.Error()})
		}
		return out, fmt.Sprintf(", bytes not read (%v)", err)
	}
	sent, acked := 0, 0
	for _, v := range vs {
		sent, acked = sent+v.Sent, acked+v.Acked
		for _, bad := range v.Violations {
			out = append(out, Finding{Rule: RuleBytesTwoWriters, Detail: fmt.Sprintf("LUN of %s: %s", v.Volume, bad)})
		}
	}
	return out, fmt.Sprintf(", %d stamped block writes (%d acknowledged) judged on the bytes of %d LUNs", sent, acked, len(vs))
}
