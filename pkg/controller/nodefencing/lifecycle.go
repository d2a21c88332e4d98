package nodefencing

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/pkg/names"
)

// lifecycleReasonPrefix starts the reason of every Node lifecycle condition
// (KEP-5683) node-fencing writes: the conditions are shared with
// administrators and other controllers, and only those that carry it are
// Fenceline's to change.
const lifecycleReasonPrefix = "Fenceline"

// LifecycleConditions are the Node lifecycle conditions (KEP-5683, the
// NodeLifecycleConditions gate) that publish the fence state given by a
// node's fencing conditions (after a write), for other controllers to
// read:
//
//   - FencingTriaged=True alone: MaintenancePlanned=True (the node may be
//     powered off soon; reason FencelineFencingTriaged);
//   - FencingRequired=True or FencingComplete=True: MaintenanceInProgress=True
//     (being fenced, fenced, or a failed fence awaiting a human; reasons
//     FencelineFencing, FencelineFenced, FencelineFencingFailed) and
//     MaintenancePlanned=False;
//   - none of them True (unfenced, cancelled): both False, reason
//     FencelineNotFencing.
//
// A lifecycle condition is only ever changed when it is absent or
// Fenceline's (its reason starts with "Fenceline"): an administrator's or
// another controller's stays as it is, whatever the fence state. A False
// one is not added where none was, so that a node Fenceline never touched
// carries none.
func LifecycleConditions(conds []v1.NodeCondition) []v1.NodeCondition {
	status := func(typ string) *v1.NodeCondition {
		for i := range conds {
			if string(conds[i].Type) == typ && conds[i].Status == v1.ConditionTrue {
				return &conds[i]
			}
		}
		return nil
	}
	triaged, required, complete := status(names.FencingTriagedCondition), status(names.FencingRequiredCondition), status(names.FencingCompleteCondition)
	planned, inProgress := v1.ConditionFalse, v1.ConditionFalse
	plannedReason, progressReason := "FencelineNotFencing", "FencelineNotFencing"
	plannedMsg, progressMsg := "Fenceline: the node is not being fenced", "Fenceline: the node is not being fenced"
	switch {
	case complete != nil:
		inProgress, progressReason, progressMsg = v1.ConditionTrue, "FencelineFenced", complete.Message
		plannedReason, plannedMsg = "FencelineFenced", complete.Message
	case required != nil && required.Reason == "FencingFailed":
		inProgress, progressReason, progressMsg = v1.ConditionTrue, "FencelineFencingFailed", required.Message
		plannedReason, plannedMsg = "FencelineFencingFailed", required.Message
	case required != nil:
		inProgress, progressReason, progressMsg = v1.ConditionTrue, "FencelineFencing", required.Message
		plannedReason, plannedMsg = "FencelineFencing", required.Message
	case triaged != nil:
		planned, plannedReason, plannedMsg = v1.ConditionTrue, "FencelineFencingTriaged", triaged.Message
	}
	var out []v1.NodeCondition
	for _, want := range []v1.NodeCondition{
		nodeCondition(string(v1.NodeMaintenancePlanned), planned, plannedReason, plannedMsg),
		nodeCondition(string(v1.NodeMaintenanceInProgress), inProgress, progressReason, progressMsg),
	} {
		i := slices.IndexFunc(conds, func(c v1.NodeCondition) bool { return c.Type == want.Type })
		switch {
		case i >= 0 && !strings.HasPrefix(conds[i].Reason, lifecycleReasonPrefix):
			// Someone else's: never ours to change.
		case i < 0 && want.Status != v1.ConditionTrue:
			// Nothing to clear.
		default:
			out = append(out, want)
		}
	}
	return out
}
