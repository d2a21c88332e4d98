package nodefencing

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"fenceline.io/fenceline/pkg/controller/explain"
	"fenceline.io/fenceline/pkg/controller/nodefencing/detect"
)

// SnapshotObserver judges a Lease as a snapshot at now, by its renewTime
// (detect.Snapshot): for a reader with no history of renewals, such as
// kubectl fenceline, where the controller counts from when it observed the
// renewal.
func SnapshotObserver(now time.Time) ObserveFunc {
	return func(l *coordinationv1.Lease) (time.Time, bool) { return detect.Snapshot(l, now).ObservedAt, false }
}

// Explain is node-fencing's verdict on the node.
func Explain(in explain.Input) []explain.Verdict {
	v := explain.Verdict{Controller: Name, Object: explain.NodeRef(in.Node)}
	if in.Fencing == nil {
		v.Decision, v.Why = "none", "the fencing API (fenceline.io CRDs) is not installed: node-fencing does not run"
		return []explain.Verdict{v}
	}
	g, err := Gather(in.Ctx, in.View, in.Fencing, in.NetworkFences, in.Node.Name, in.Now, SnapshotObserver(in.Now))
	if err != nil {
		v.Decision, v.Why = "unknown", err.Error()
		return []explain.Verdict{v}
	}
	d := Decide(g)
	v.Decision, v.Why = d.Word(), d.Why
	return []explain.Verdict{v}
}

// Word is the decision in a word or two: its step ("wait" for none), then
// its reason in brackets, as kubectl fenceline shows it.
func (d Decision) Word() string {
	w := string(d.Step)
	if d.Step == StepNone {
		w = "wait"
	}
	if d.Reason != "" {
		w += " (" + d.Reason + ")"
	}
	return w
}
