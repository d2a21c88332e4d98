package chaos

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/invariant"
	"fenceline.io/fenceline/test/world"
)

// Volume names a volume: handles are a driver's own, so two drivers may
// use the same one.
type Volume struct{ Driver, Handle string }

// Facts is everything an episode recorded, for Check.
type Facts struct {
	// Audit holds every mock driver's audit log, by driver name.
	Audit map[string][]audit.Record
	// SingleWriter holds the ReadWriteOnce volumes.
	SingleWriter map[Volume]bool
	// NotSafeDetach holds the pods (namespace/name) whose volume is of a
	// driver not annotated safe-detach: quarantine must leave them alone.
	NotSafeDetach map[string]bool
	// Nodes and Deletions are the API history (History.Snapshot).
	Nodes     []NodeState
	Deletions []PodDeletion
	// Power holds each BMC's power log by node; nil without BMCs.
	Power map[string][]world.PowerChange
	// PowerCommands holds the power commands each BMC received, by node.
	PowerCommands map[string][]world.PowerCommand
	// LyingBMC holds, for the node whose BMC lied (Plan.LyingBMC),
	// when: meanwhile its BMC accepted a power-off, left the node running
	// and read Off.
	LyingBMC map[string]Lie
	// Skews holds how far off each skewed node's clock ran, for the
	// findings' details.
	Skews map[string]time.Duration
	// Failed holds the nodes the episode cut off (power or partition).
	Failed map[string]bool
	// UpstreamTaintEviction is true when kube-controller-manager's
	// taint-eviction-controller runs (Fenceline's is off).
	UpstreamTaintEviction bool
	// Requests are the FencingRequests' recorded states, and
	// MaxConcurrentFencing the policy's storm-guard limit on requests in
	// phase Fencing at once (0: not judged, as without node fencing).
	Requests             []RequestState
	MaxConcurrentFencing int
	// OperatorTaintRemovals holds, for each node the operator ever put
	// out of service, the resourceVersions of the operator's own removals
	// of that taint (none while it is still there).
	OperatorTaintRemovals map[string][]uint64
}

// Judged summarises the facts: how many audit records, accepted and
// refused writes, fenced unpublishes, node states, pod deletions and
// power changes the checker read.
func (f Facts) Judged() string {
	var accepted, refused, fenced, power, records int
	for _, r := range slices.Concat(slices.Collect(maps.Values(f.Audit))...) {
		records++
		switch {
		case r.Method == "Write" && r.Code == "OK":
			accepted++
		case r.Method == "Write":
			refused++
		case r.Method == "ControllerUnpublishVolume" && r.Fence && audit.Effective()(r):
			fenced++
		}
	}
	for _, l := range f.Power {
		power += len(l)
	}
	logs := ""
	if len(f.Audit) > 1 {
		logs = fmt.Sprintf(" of %d drivers", len(f.Audit))
	}
	return fmt.Sprintf("%d audit records%s (%d writes accepted, %d refused, %d fenced unpublishes), %d node states, %d pod deletions, %d power changes, %d fencing request states",
		records, logs, accepted, refused, fenced, len(f.Nodes), len(f.Deletions), power, len(f.Requests))
}

// Finding is one broken invariant.
type Finding struct {
	Rule   string
	Detail string
	// Upstream marks what kube-controller-manager or the node's kubelet
	// (KWOK) did, not Fenceline: it is reported, and does not fail the
	// episode.
	Upstream bool
}

func (f Finding) String() string { return f.Rule + ": " + f.Detail }

// The rules Check judges beyond the audit log's (invariant.CheckHistory).
const (
	RuleForceDeleteWithoutTrigger = "force-delete-without-trigger"
	RuleHealthyNodePodDeleted     = "healthy-node-pod-deleted"
	RuleFencedWithoutVerifiedOff  = "fencing-complete-without-verified-off"
	RuleOutOfServiceBeforeOff     = "out-of-service-without-verified-off"
	RuleHealthyNodeFenced         = "healthy-node-powered-off"
	RuleOperatorTaintRemoved      = "operator-out-of-service-taint-removed"
	RuleStormGuardConcurrency     = "storm-guard-max-concurrent-fencing"
	// RuleLyingFenceNotCaught: a node taken for fenced on its lying BMC's
	// read-back Off (it never stopped) came back with the boot ID it had,
	// and node fencing never marked it LyingFence.
	RuleLyingFenceNotCaught = "lying-fence-not-caught"
	// RuleUpstreamEvictedReplacement: kube-controller-manager's
	// taint-eviction-controller deleted, by name, the replacement of a pod
	// it had queued for eviction on the failed node (it deletes without a
	// UID precondition, and retries). Fenceline's taint-eviction deletes
	// with one; with it on, the same deletion is a violation.
	RuleUpstreamEvictedReplacement = "upstream-taint-eviction-deleted-a-replacement"
	// RuleUnmarkedDeletion: a pod of a healthy node was deleted without a
	// DisruptionTarget condition. Fenceline marks every pod it deletes
	// (force or graceful) before the delete, which carries a UID
	// precondition; an unmarked deletion is another component's. KWOK,
	// the kubelet stand-in of these clusters, completes a graceful
	// deletion by name and retries it, and so can delete a replacement of
	// the same name (a real kubelet deletes with a UID precondition).
	RuleUnmarkedDeletion = "healthy-node-pod-deleted-by-name-not-by-fenceline"
	// RuleNotSafeDetachQuarantined: a pod whose volume is of a driver
	// without the safe-detach annotation left a node that was not Ready
	// and carried quarantine as its only trigger. Quarantine must refuse
	// such a pod: only a safe-detach driver promises the fence that makes
	// its release safe.
	RuleNotSafeDetachQuarantined = "not-safe-detach-pod-deleted-under-quarantine"
)

// Check judges an episode's facts against the safety invariants:
//
//  1. never two writers, unpublish before publish, fenced where the node
//     may still write (each driver's audit log, every RWO volume);
//  2. a pod disappears from a node that is not Ready only when the node
//     carries a trigger: out of service, FencingComplete, quarantine or
//     force-eviction (nothing else may delete it: no kubelet confirms);
//     quarantine alone is no trigger for a pod of a driver that is not
//     safe-detach. A pod whose containers the node's own kubelet reported
//     terminated is no such deletion: a kubelet that came back finished
//     it, before its node status said Ready again;
//  3. with node fencing, FencingComplete turns True and the out-of-service
//     taint appears only while the node's BMC last cut its power (a
//     verified Off, not a promise);
//  4. nothing is deleted from, no power-off command sent to, no power
//     cut made to, and no fencing decided for a node the episode did not
//     fail (checkHealthyNodes), whatever its clock says;
//  5. the operator's out-of-service taint is removed only by the operator,
//     and no more nodes are fencing at once than the storm guard allows.
//
// It is a pure function, table-tested with violating histories.
func Check(f Facts) []Finding {
	var out []Finding
	for _, d := range slices.Sorted(maps.Keys(f.Audit)) {
		for _, v := range invariant.CheckHistory(f.Audit[d], func(vol string) bool { return f.SingleWriter[Volume{d, vol}] }) {
			detail := v.String()
			if len(f.Audit) > 1 {
				detail = "driver " + d + ": " + detail
			}
			out = append(out, Finding{Rule: string(v.Rule), Detail: detail})
		}
	}
	byNode := map[string][]NodeState{}
	for _, s := range f.Nodes {
		byNode[s.Name] = append(byNode[s.Name], s)
	}
	for n := range byNode {
		slices.SortStableFunc(byNode[n], func(a, b NodeState) int { return compareRV(a.RV, b.RV) })
	}
	out = append(out, checkDeletions(f, byNode)...)
	out = append(out, checkFencingComplete(f, byNode)...)
	out = append(out, checkHealthyNodes(f, byNode)...)
	out = append(out, checkOperatorTaints(f, byNode)...)
	out = append(out, checkConcurrentFencing(f)...)
	return out
}

// checkConcurrentFencing replays the FencingRequests' states in
// resourceVersion order and finds each moment more nodes had a request in
// phase Fencing than MaxConcurrentFencing.
func checkConcurrentFencing(f Facts) []Finding {
	if f.MaxConcurrentFencing <= 0 {
		return nil
	}
	states := slices.Clone(f.Requests)
	slices.SortStableFunc(states, func(a, b RequestState) int { return compareRV(a.RV, b.RV) })
	current := map[string]RequestState{}
	var out []Finding
	over := false
	for _, s := range states {
		if s.Gone {
			delete(current, s.Name)
		} else {
			current[s.Name] = s
		}
		fencing := map[string]bool{}
		for _, r := range current {
			if r.Phase == fencingv1alpha1.FencingPhaseFencing {
				fencing[r.Node] = true
			}
		}
		if len(fencing) > f.MaxConcurrentFencing && !over {
			out = append(out, Finding{Rule: RuleStormGuardConcurrency, Detail: fmt.Sprintf("%d nodes fencing at once at rv %d (seen %s): %v; maxConcurrentFencing is %d",
				len(fencing), s.RV, clock(s.Seen), slices.Sorted(maps.Keys(fencing)), f.MaxConcurrentFencing)})
		}
		over = len(fencing) > f.MaxConcurrentFencing
	}
	return out
}

// checkDeletions judges the pods deleted from the nodes the episode
// failed (checkHealthyDeletions judges the others).
func checkDeletions(f Facts, byNode map[string][]NodeState) []Finding {
	var out []Finding
	for _, d := range f.Deletions {
		if d.Node == "" || !f.Failed[d.Node] {
			continue
		}
		pod := d.Namespace + "/" + d.Name
		s, ok := stateAt(byNode[d.Node], d)
		if !ok {
			out = append(out, Finding{Rule: RuleForceDeleteWithoutTrigger, Detail: fmt.Sprintf("pod %s deleted from %s before any recorded state of the node", pod, d.Node)})
			continue
		}
		if s.Ready != corev1.ConditionTrue && !s.Triggered() && !d.KubeletStopped {
			out = append(out, Finding{Rule: RuleForceDeleteWithoutTrigger, Detail: fmt.Sprintf("pod %s deleted from %s (rv %d, seen %s) while the node was Ready=%q with no out-of-service, FencingComplete, quarantine or force-eviction (node rv %d)", pod, d.Node, d.RV, clock(d.Seen), s.Ready, s.RV)})
		}
		quarantineOnly := s.Ready != corev1.ConditionTrue && s.Quarantined && s.OutOfService == nil && !s.FencingComplete && !s.ForceEvicted
		if f.NotSafeDetach[pod] && quarantineOnly && !d.KubeletStopped {
			out = append(out, Finding{Rule: RuleNotSafeDetachQuarantined, Detail: fmt.Sprintf("pod %s, whose volume's driver is not safe-detach, deleted from %s (rv %d, seen %s) while the node was Ready=%q with quarantine its only trigger (node rv %d)", pod, d.Node, d.RV, clock(d.Seen), s.Ready, s.RV)})
		}
	}
	return out
}

// stateAt is the node's state when the pod was deleted: its latest
// version before the deletion's revision (the history holds every
// version etcd stored).
func stateAt(states []NodeState, d PodDeletion) (NodeState, bool) {
	var last NodeState
	found := false
	for _, s := range states {
		if s.RV < d.RV {
			last, found = s, true
		}
	}
	return last, found
}

// checkFencingComplete judges, in node-fencing episodes (where nodes have
// BMCs and no operator taints anything), each node's turn to
// FencingComplete=True and each appearance of the out-of-service taint:
// both only while the node's BMC last cut its power, or while its BMC
// lied (it read Off for a node that ran on): then the lie must be caught
// once the node is back (LyingFence).
func checkFencingComplete(f Facts, byNode map[string][]NodeState) []Finding {
	if f.Power == nil {
		return nil
	}
	var out []Finding
	for node, states := range byNode {
		fenced, oos, lied, caught := false, false, false, false
		for _, s := range states {
			verified := offAround(f.Power[node], s.Seen)
			turned := (s.FencingComplete && !fenced) || (s.OutOfService != nil && !oos)
			if turned && !verified && lyingAt(f.LyingBMC, node, s.Seen) {
				// Fenced on the lie's read-back Off: nothing above the
				// BMC can tell at the fence.
				verified, lied = true, true
			}
			if s.FencingComplete && !fenced && !verified {
				out = append(out, Finding{Rule: RuleFencedWithoutVerifiedOff, Detail: fmt.Sprintf("%s turned FencingComplete=True (rv %d, seen %s) while its BMC had not cut its power (power log %v)", node, s.RV, clock(s.Seen), f.Power[node])})
			}
			if s.OutOfService != nil && !oos && !verified {
				out = append(out, Finding{Rule: RuleOutOfServiceBeforeOff, Detail: fmt.Sprintf("%s got the out-of-service taint (rv %d, seen %s) while its BMC had not cut its power (power log %v)", node, s.RV, clock(s.Seen), f.Power[node])})
			}
			fenced, oos = s.FencingComplete, s.OutOfService != nil
			caught = caught || (lied && s.LyingFence)
		}
		if lied && !caught {
			out = append(out, Finding{Rule: RuleLyingFenceNotCaught, Detail: fmt.Sprintf("%s was fenced on the read-back Off of a BMC that lied (from %s) and never marked LyingFence (power log %v)", node, clock(f.LyingBMC[node].From), f.Power[node])})
		}
	}
	return out
}

// lyingAt reports whether node's BMC was lying at t (a write seen at t
// was decided on a read-back before it), or up to powerRace before.
func lyingAt(lying map[string]Lie, node string, t time.Time) bool {
	l, ok := lying[node]
	return ok && (l.covers(t) || l.covers(t.Add(-powerRace)))
}

// powerRace is how long before a write was seen its decision may have
// been taken on a verified Off: a node powered on again (a power cycle)
// between the fence's read-back and the write it allowed is not a fence
// without an Off. Anything older is.
const powerRace = time.Second

// offAround reports whether the power was off when a write seen at t was
// decided: at t, or powerRace before it.
func offAround(log []world.PowerChange, t time.Time) bool {
	return offAt(log, t) || offAt(log, t.Add(-powerRace))
}

// offAt reports whether the last power change at or before t cut the
// power.
func offAt(log []world.PowerChange, t time.Time) bool {
	off := false
	for _, c := range log {
		if !c.Time.After(t) {
			off = !c.On
		}
	}
	return off
}

// checkOperatorTaints finds the operator's out-of-service taint leaving
// a node at a state no removal of the operator explains: one whose
// resourceVersion is in (previous state, this state].
func checkOperatorTaints(f Facts, byNode map[string][]NodeState) []Finding {
	var out []Finding
	for node, removals := range f.OperatorTaintRemovals {
		had, prev := false, uint64(0)
		for _, s := range byNode[node] {
			has := s.OutOfService != nil && *s.OutOfService == world.OutOfServiceTaint.Value
			explained := slices.ContainsFunc(removals, func(r uint64) bool { return r > prev && r <= s.RV })
			if had && !has && !explained {
				out = append(out, Finding{Rule: RuleOperatorTaintRemoved, Detail: fmt.Sprintf("the operator's out-of-service taint left %s at rv %d (seen %s), and the operator did not remove it", node, s.RV, clock(s.Seen))})
			}
			had, prev = has, s.RV
		}
	}
	return out
}

func compareRV(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
