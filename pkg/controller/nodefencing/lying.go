package nodefencing

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// ReasonLyingFence is the reason of a Decision, a request condition, the
// node condition names.LyingFenceCondition and a Warning Event: a node
// recorded Fenced shows signs of life with the boot ID it had when fenced.
const ReasonLyingFence = "LyingFence"

// EventLyingFence is the Warning Event on the Node and its FencingRequest
// when a lying fence is caught.
const EventLyingFence = "LyingFence"

// minSigns is how many writes of one kubelet loop (Lease renewals, or
// status reports of Ready) the controller must observe after it began
// watching a fence before it believes the node ran after it. Each loop
// writes one request at a time, so at most one write sent before the power
// was cut can still arrive late (a watch delay shorter than the loop's
// interval, 10 s by default); a second one was sent after the fence.
const minSigns = 2

// LifeSigns are the writes of a node's kubelet that the controller itself
// observed change since it began watching the node's Fenced request. They
// are counted by change, never by comparing the node's timestamps with the
// controller's clock: renewTime and lastHeartbeatTime are the node's
// clock, only their changes count.
type LifeSigns struct {
	// Watching: the controller has a mark for the request (it saw it
	// Fenced); without one the counts are zero and prove nothing.
	Watching bool
	// LeaseRenewals counts the distinct renewals of the node's Lease seen
	// since the mark.
	LeaseRenewals int
	// ReadyReports counts the kubelet's reports of Ready=True seen since
	// the mark: Ready turning True, or its heartbeat changing while True.
	ReadyReports int
}

// FenceVerdict is JudgeFence's answer.
type FenceVerdict struct {
	// Alive: the node was observed writing after its fence.
	Alive bool
	// Lying: alive with the boot ID it had when fenced, so the machine
	// that was recorded powered off never stopped.
	Lying bool
	// Why says it in words, with the counts.
	Why string
}

// JudgeFence is the one check of a fence's truth, used both to decide the
// request's next step (a Ready condition read before the fence is no sign
// of life) and to report a lying fence. A node recorded Fenced whose
// kubelet is observed renewing its Lease, or reporting Ready, at least
// minSigns times since the fence, with the boot ID recorded at fence
// time, is a lying fence: the fence device read Off while the node ran,
// or powered off another machine. Nothing follows from it but reports:
// the storage fence stays, and a node that never stopped is never
// unfenced by the controller (its boot ID did not change).
func JudgeFence(r *fencingv1alpha1.FencingRequest, node *v1.Node, s LifeSigns) FenceVerdict {
	if r == nil || node == nil || r.Status.Phase != fencingv1alpha1.FencingPhaseFenced {
		return FenceVerdict{Why: "no Fenced request for the node"}
	}
	counts := fmt.Sprintf("%d Lease renewals and %d Ready reports observed since the fence", s.LeaseRenewals, s.ReadyReports)
	if s.LeaseRenewals < minSigns && s.ReadyReports < minSigns {
		return FenceVerdict{Why: fmt.Sprintf("no sign of life: %s (%d of either prove one)", counts, minSigns)}
	}
	at, boot := r.Status.BootIDAtFence, node.Status.NodeInfo.BootID
	switch {
	case at == "" || boot == "":
		return FenceVerdict{Alive: true, Why: counts + "; the boot ID when fenced or now is unknown, so a reboot cannot be told from a fence that lied"}
	case at != boot:
		return FenceVerdict{Alive: true, Why: fmt.Sprintf("%s, with a new boot ID (%s, was %s): it rebooted", counts, boot, at)}
	}
	return FenceVerdict{Alive: true, Lying: true, Why: fmt.Sprintf(
		"lying fence: FencingRequest %s recorded the node powered off, yet %s, with the boot ID it had when fenced (%s): the fence device reported Off while the node ran, or cut another machine; the storage fence stays and nothing is unfenced automatically",
		r.Name, counts, boot)}
}

// fencedNode is decideFenced's judgement of a fenced node whose boot ID is
// the one it had when fenced: not Ready, or Ready only as last reported
// before the fence (no sign of life since), it is down; alive, its fence
// lied. hold is false for any other node (a new or unknown boot ID), which
// the reboot rule decides.
func fencedNode(in Input, node *v1.Node) (d Decision, hold bool) {
	if !nodeutil.IsReady(node) {
		return Decision{Reason: ReasonNodeDown, Why: "the node is fenced and not Ready"}, true
	}
	at, boot := in.Request.Status.BootIDAtFence, node.Status.NodeInfo.BootID
	if at == "" || boot != at {
		return Decision{}, false
	}
	v := JudgeFence(in.Request, node, in.Signs)
	switch {
	case v.Lying:
		return Decision{Reason: ReasonLyingFence, Why: v.Why}, true
	case lieRecorded(node):
		// Caught before (the condition is the durable record; a restarted
		// controller has no observations yet): still the same boot.
		return Decision{Reason: ReasonLyingFence, Why: "a lying fence was caught on the node and it still has the boot ID it had when fenced: " + nodeutil.Condition(node, names.LyingFenceCondition).Message}, true
	}
	return Decision{Reason: ReasonNodeDown, Why: "the node is fenced; its Ready condition is from before the fence: " + v.Why}, true
}

// lieRecorded reports whether the node carries the lying-fence condition
// True.
func lieRecorded(node *v1.Node) bool {
	c := nodeutil.Condition(node, names.LyingFenceCondition)
	return c != nil && c.Status == v1.ConditionTrue
}

// LieCondition is the node condition names.LyingFenceCondition the node
// should carry, when it should be written: True when its Fenced request
// is judged a lying fence; False, on a node that carries it True, once the
// lie is over: the request is no longer Fenced (unfenced, deleted), or the
// node reports a new boot ID. A node that carries it True with its fenced
// boot keeps it, also when this controller has no observations (after a
// restart). Any other node never gets the condition.
func LieCondition(in Input) (v1.NodeCondition, bool) {
	node := liveNode(in)
	if node == nil {
		return v1.NodeCondition{}, false
	}
	v := JudgeFence(in.Request, node, in.Signs)
	if v.Lying {
		return nodeCondition(names.LyingFenceCondition, v1.ConditionTrue, ReasonLyingFence, v.Why), true
	}
	if !lieRecorded(node) {
		return v1.NodeCondition{}, false
	}
	r := in.Request
	switch {
	case r == nil || r.Status.Phase != fencingv1alpha1.FencingPhaseFenced:
		return nodeCondition(names.LyingFenceCondition, v1.ConditionFalse, "NotFenced", "the node has no Fenced request any more"), true
	case r.Status.BootIDAtFence != "" && node.Status.NodeInfo.BootID != "" && node.Status.NodeInfo.BootID != r.Status.BootIDAtFence:
		return nodeCondition(names.LyingFenceCondition, v1.ConditionFalse, "NewBootID",
			fmt.Sprintf("the node rebooted (boot ID %s, was %s): the machine that lied is gone; check its fence device", node.Status.NodeInfo.BootID, r.Status.BootIDAtFence)), true
	}
	return v1.NodeCondition{}, false
}
