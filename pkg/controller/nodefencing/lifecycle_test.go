package nodefencing

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

func TestLifecycleConditions(t *testing.T) {
	cond := func(typ string, status v1.ConditionStatus, reason string) v1.NodeCondition {
		return nodeCondition(typ, status, reason, typ+" "+reason)
	}
	planned, inProgress := string(v1.NodeMaintenancePlanned), string(v1.NodeMaintenanceInProgress)
	triaged := cond(names.FencingTriagedCondition, v1.ConditionTrue, "LeaseExpired")
	required := cond(names.FencingRequiredCondition, v1.ConditionTrue, "LeaseExpired")
	failed := cond(names.FencingRequiredCondition, v1.ConditionTrue, "FencingFailed")
	complete := cond(names.FencingCompleteCondition, v1.ConditionTrue, "Level1Verified")
	unfenced := []v1.NodeCondition{
		cond(names.FencingTriagedCondition, v1.ConditionFalse, "Unfenced"),
		cond(names.FencingRequiredCondition, v1.ConditionFalse, "Unfenced"),
		cond(names.FencingCompleteCondition, v1.ConditionFalse, "Unfenced"),
	}
	notFencing := "Fenceline: the node is not being fenced"
	for _, tc := range []struct {
		name  string
		conds []v1.NodeCondition
		want  []v1.NodeCondition
	}{
		{name: "never fenced: nothing added", conds: []v1.NodeCondition{cond("Ready", v1.ConditionTrue, "KubeletReady")}},
		{name: "triaged: maintenance planned", conds: []v1.NodeCondition{triaged},
			want: []v1.NodeCondition{nodeCondition(planned, v1.ConditionTrue, "FencelineFencingTriaged", triaged.Message)}},
		{name: "admitted: maintenance in progress, no longer only planned",
			conds: []v1.NodeCondition{triaged, required, nodeCondition(planned, v1.ConditionTrue, "FencelineFencingTriaged", "")},
			want: []v1.NodeCondition{
				nodeCondition(planned, v1.ConditionFalse, "FencelineFencing", required.Message),
				nodeCondition(inProgress, v1.ConditionTrue, "FencelineFencing", required.Message),
			}},
		{name: "fenced", conds: []v1.NodeCondition{triaged, required, complete, nodeCondition(inProgress, v1.ConditionTrue, "FencelineFencing", "")},
			want: []v1.NodeCondition{nodeCondition(inProgress, v1.ConditionTrue, "FencelineFenced", complete.Message)}},
		{name: "a failed fence stays in maintenance: a human must act", conds: []v1.NodeCondition{triaged, failed},
			want: []v1.NodeCondition{nodeCondition(inProgress, v1.ConditionTrue, "FencelineFencingFailed", failed.Message)}},
		{name: "unfenced: ours cleared",
			conds: append(unfenced, nodeCondition(planned, v1.ConditionFalse, "FencelineFencing", ""), nodeCondition(inProgress, v1.ConditionTrue, "FencelineFenced", "")),
			want: []v1.NodeCondition{
				nodeCondition(planned, v1.ConditionFalse, "FencelineNotFencing", notFencing),
				nodeCondition(inProgress, v1.ConditionFalse, "FencelineNotFencing", notFencing),
			}},
		{name: "an administrator's maintenance is never changed, fenced or not",
			conds: []v1.NodeCondition{triaged, required, complete, cond(inProgress, v1.ConditionTrue, "KernelUpgrade"), cond(planned, v1.ConditionFalse, "Done")}},
		{name: "an administrator's cleared condition is not taken over either",
			conds: append(unfenced, cond(inProgress, v1.ConditionFalse, "UpgradeDone"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LifecycleConditions(tc.conds)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LifecycleConditions (-want +got):\n%s", diff)
			}
		})
	}
}

// With the gate on, the fence state is on the node as lifecycle conditions
// through a whole fence and recovery, written with the fencing conditions;
// with it off (the default) none is ever written.
func TestSyncLifecycleConditions(t *testing.T) {
	lifecycle := func(e *env) map[v1.NodeConditionType]string {
		out := map[v1.NodeConditionType]string{}
		for _, c := range e.node("n1").Status.Conditions {
			if c.Type == v1.NodeMaintenancePlanned || c.Type == v1.NodeMaintenanceInProgress {
				out[c.Type] = string(c.Status) + "/" + c.Reason
			}
		}
		return out
	}
	want := func(e *env, stage string, w map[v1.NodeConditionType]string) {
		t.Helper()
		if diff := cmp.Diff(w, lifecycle(e)); diff != "" {
			t.Errorf("%s: lifecycle conditions (-want +got):\n%s", stage, diff)
		}
	}
	now := testobj.Epoch
	e := startEnvWith(t, now, true, func(c *Config) { c.LifecycleConditions = true }, clusterManual(now)...)
	e.sync("n1") // create
	e.sync("n1") // triage; the approval is by hand
	want(e, "triaged", map[v1.NodeConditionType]string{v1.NodeMaintenancePlanned: "True/FencelineFencingTriaged"})
	e.approve("n1")
	e.sync("n1") // admit
	want(e, "admitted", map[v1.NodeConditionType]string{v1.NodeMaintenancePlanned: "False/FencelineFencing", v1.NodeMaintenanceInProgress: "True/FencelineFencing"})
	e.agentWrites("n1", func(s *fencingv1alpha1.FencingRequestStatus) {
		s.Attempts = []fencingv1alpha1.FenceAttempt{testobj.FenceAttempt(1, "bmc", succeeded, off)}
	})
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseFenced)
	want(e, "fenced", map[v1.NodeConditionType]string{v1.NodeMaintenancePlanned: "False/FencelineFenced", v1.NodeMaintenanceInProgress: "True/FencelineFenced"})
	e.sync("n1") // out of service
	e.comesBack("boot-2")
	e.sync("n1")
	e.sync("n1")
	e.wantPhase("n1", fencingv1alpha1.FencingPhaseRecovered)
	want(e, "recovered", map[v1.NodeConditionType]string{v1.NodeMaintenancePlanned: "False/FencelineNotFencing", v1.NodeMaintenanceInProgress: "False/FencelineNotFencing"})

	off := newEnv(t, now, cluster(now, nil)...)
	off.fenceToFenced()
	want(off, "gate off", map[v1.NodeConditionType]string{})
}
