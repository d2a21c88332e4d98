package chaos

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/mock-driver/audit"
	"fenceline.io/fenceline/test/world"
)

var t0 = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

// facts builds an episode's facts: node a failed, node b healthy, each
// step one second and one resourceVersion after the previous.
type facts struct {
	Facts
	rv uint64
	// driver is the driver whose audit log write and call append to
	// (world.DriverName until on says otherwise).
	driver string
}

func newFacts() *facts {
	f := &facts{Facts: Facts{Audit: map[string][]audit.Record{}, SingleWriter: map[Volume]bool{{world.DriverName, "vol"}: true},
		NotSafeDetach: map[string]bool{}, Failed: map[string]bool{"a": true},
		Power: map[string][]world.PowerChange{}, OperatorTaintRemovals: map[string][]uint64{}}}
	f.driver = world.DriverName
	return f.node("a", corev1.ConditionTrue).node("b", corev1.ConditionTrue)
}

// on makes the next calls and writes driver's, and its volume "vol" (a
// handle the first driver uses too) a single-writer one.
func (f *facts) on(driver string) *facts {
	f.driver = driver
	f.SingleWriter[Volume{driver, "vol"}] = true
	return f
}

// notSafeDetach makes the pod db0-0's volume one of a driver that is not
// safe-detach.
func (f *facts) notSafeDetach() *facts {
	f.NotSafeDetach["chaos/db0-0"] = true
	return f
}

func (f *facts) next() (uint64, time.Time) {
	f.rv++
	return f.rv, t0.Add(time.Duration(f.rv) * time.Second)
}

func (f *facts) node(name string, ready corev1.ConditionStatus, mutate ...func(*NodeState)) *facts {
	rv, at := f.next()
	s := NodeState{RV: rv, Seen: at, Name: name, Ready: ready}
	for _, m := range mutate {
		m(&s)
	}
	f.Nodes = append(f.Nodes, s)
	return f
}

// noBMCs makes an episode without node fencing: no BMC power logs.
func (f *facts) noBMCs() *facts {
	f.Power = nil
	return f
}

func (f *facts) deleted(node string) *facts { return f.deletedBy(node, "") }

// deletedBy records a deletion whose pod carried a DisruptionTarget
// condition of reason.
func (f *facts) deletedBy(node, reason string) *facts {
	rv, at := f.next()
	f.Deletions = append(f.Deletions, PodDeletion{RV: rv, Seen: at, Namespace: "chaos", Name: "db0-0", Node: node, Disruption: reason})
	return f
}

// stoppedByKubelet records a deletion whose pod's containers the node's
// kubelet had reported terminated.
func (f *facts) stoppedByKubelet(node string) *facts {
	f.deleted(node)
	f.Deletions[len(f.Deletions)-1].KubeletStopped = true
	return f
}

func (f *facts) upstreamTaintEviction() *facts {
	f.UpstreamTaintEviction = true
	return f
}

func (f *facts) power(node string, on bool) *facts {
	_, at := f.next()
	f.Power[node] = append(f.Power[node], world.PowerChange{Time: at, On: on})
	return f
}

// powerAt records a power change d before the next step's time.
func (f *facts) powerAt(node string, on bool, d time.Duration) *facts {
	f.Power[node] = append(f.Power[node], world.PowerChange{Time: t0.Add(time.Duration(f.rv+1) * time.Second).Add(-d), On: on})
	return f
}

func (f *facts) write(node string, code string) *facts {
	_, at := f.next()
	f.Audit[f.driver] = append(f.Audit[f.driver], audit.Record{Time: at, Method: "Write", VolumeID: "vol", NodeID: node, Code: code})
	return f
}

func (f *facts) call(method, node string, fence bool) *facts {
	_, at := f.next()
	f.Audit[f.driver] = append(f.Audit[f.driver], audit.Record{Time: at, Method: method, VolumeID: "vol", NodeID: node, Code: "OK", Fence: fence})
	return f
}

// operatorRemoved is the operator's removal: the next node state of node
// (rv+1) is the one it wrote.
func (f *facts) operatorRemoved(node string) *facts {
	f.OperatorTaintRemovals[node] = append(f.OperatorTaintRemovals[node], f.rv+1)
	return f
}

// operatorAdded registers node as tainted by the operator.
func (f *facts) operatorAdded(node string) *facts {
	f.OperatorTaintRemovals[node] = append(f.OperatorTaintRemovals[node], []uint64{}...)
	return f
}

// request records a FencingRequest's state; limit sets the storm guard's
// maxConcurrentFencing.
func (f *facts) request(name, node string, phase fencingv1alpha1.FencingPhase) *facts {
	rv, at := f.next()
	f.Requests = append(f.Requests, RequestState{RV: rv, Seen: at, Name: name, Node: node, Phase: phase})
	return f
}

func (f *facts) requestGone(name, node string) *facts {
	rv, at := f.next()
	f.Requests = append(f.Requests, RequestState{RV: rv, Seen: at, Name: name, Node: node, Gone: true})
	return f
}

// failed adds node to the nodes the episode failed (two-node failures).
func (f *facts) failed(node string) *facts {
	f.Failed[node] = true
	return f
}

// skewed records that node's clock ran off by d.
func (f *facts) skewed(node string, d time.Duration) *facts {
	if f.Skews == nil {
		f.Skews = map[string]time.Duration{}
	}
	f.Skews[node] = d
	return f
}

// command records a power command node's BMC received.
func (f *facts) command(node, action string, ok bool) *facts {
	if f.PowerCommands == nil {
		f.PowerCommands = map[string][]world.PowerCommand{}
	}
	f.PowerCommands[node] = append(f.PowerCommands[node], world.PowerCommand{Action: action, OK: ok})
	return f
}

// lies makes node's BMC lie from the next step on.
func (f *facts) lies(node string) *facts {
	if f.LyingBMC == nil {
		f.LyingBMC = map[string]Lie{}
	}
	f.LyingBMC[node] = Lie{From: t0.Add(time.Duration(f.rv+1) * time.Second)}
	return f
}

func (f *facts) limit(n int) *facts {
	f.MaxConcurrentFencing = n
	return f
}

func outOfService(v string) func(*NodeState) { return func(s *NodeState) { s.OutOfService = &v } }
func fencingComplete(s *NodeState)           { s.FencingComplete = true }
func quarantined(s *NodeState)               { s.Quarantined = true }
func lyingFence(s *NodeState)                { s.LyingFence = true }

func TestCheck(t *testing.T) {
	operator := world.OutOfServiceTaint.Value
	tests := []struct {
		name  string
		f     *facts
		rules []string
	}{
		{
			name: "fenced through the BMC, then force-deleted: clean",
			f: newFacts().node("a", corev1.ConditionUnknown).power("a", false).
				node("a", corev1.ConditionUnknown, fencingComplete, outOfService("fenced")).deleted("a"),
		},
		{
			name:  "force-deleted from a NotReady node with no trigger",
			f:     newFacts().node("a", corev1.ConditionUnknown).deleted("a"),
			rules: []string{RuleForceDeleteWithoutTrigger},
		},
		{
			name: "the trigger came after the deletion",
			f: newFacts().node("a", corev1.ConditionUnknown).deleted("a").
				node("a", corev1.ConditionUnknown, quarantined),
			rules: []string{RuleForceDeleteWithoutTrigger},
		},
		{
			name: "its containers reported terminated by a kubelet that came back, node not Ready yet: the kubelet's own deletion",
			f:    newFacts().node("a", corev1.ConditionUnknown).stoppedByKubelet("a"),
		},
		{
			name: "quarantine only, a driver that is not safe-detach, its containers reported terminated: the kubelet's own deletion",
			f:    newFacts().notSafeDetach().node("a", corev1.ConditionUnknown, quarantined).stoppedByKubelet("a"),
		},
		{
			name: "deleted from a Ready node: a kubelet confirmed it",
			f:    newFacts().deleted("a"),
		},
		{
			name:  "a pod of a node the episode never failed, marked by Fenceline",
			f:     newFacts().deletedBy("b", "fenceline"),
			rules: []string{RuleHealthyNodePodDeleted},
		},
		{
			name:  "a pod of a node the episode never failed, unmarked: another component's, reported",
			f:     newFacts().deleted("b"),
			rules: []string{RuleUnmarkedDeletion},
		},
		{
			name:  "kube-controller-manager's taint eviction deleted a replacement: reported as upstream's",
			f:     newFacts().upstreamTaintEviction().deletedBy("b", "DeletionByTaintManager"),
			rules: []string{RuleUpstreamEvictedReplacement},
		},
		{
			name:  "the same with Fenceline's taint eviction: a violation",
			f:     newFacts().deletedBy("b", "DeletionByTaintManager"),
			rules: []string{RuleHealthyNodePodDeleted},
		},
		{
			name: "FencingComplete before the BMC cut the power",
			f: newFacts().node("a", corev1.ConditionUnknown, fencingComplete).power("a", false).
				node("a", corev1.ConditionUnknown, fencingComplete),
			rules: []string{RuleFencedWithoutVerifiedOff},
		},
		{
			name: "FencingComplete after the node was powered back on",
			f: newFacts().power("a", false).power("a", true).
				node("a", corev1.ConditionUnknown, fencingComplete),
			rules: []string{RuleFencedWithoutVerifiedOff},
		},
		{
			name: "fenced on a verified Off, the node powered on again just before the write was seen",
			f: newFacts().power("a", false).powerAt("a", true, 500*time.Millisecond).
				node("a", corev1.ConditionUnknown, outOfService("fenced"), fencingComplete),
		},
		{
			name: "FencingComplete long after the node came back",
			f: newFacts().power("a", false).power("a", true).node("a", corev1.ConditionTrue).node("a", corev1.ConditionTrue).
				node("a", corev1.ConditionTrue, fencingComplete),
			rules: []string{RuleFencedWithoutVerifiedOff},
		},
		{
			name: "out of service before the BMC cut the power",
			f: newFacts().node("a", corev1.ConditionUnknown, outOfService("fenced")).power("a", false).
				node("a", corev1.ConditionUnknown, outOfService("fenced"), fencingComplete),
			rules: []string{RuleOutOfServiceBeforeOff},
		},
		{
			name:  "a healthy node powered off",
			f:     newFacts().power("b", false),
			rules: []string{RuleHealthyNodeFenced},
		},
		{
			name:  "a healthy node whose clock runs 30 s behind, powered off",
			f:     newFacts().skewed("b", -30*time.Second).power("b", false),
			rules: []string{RuleHealthyNodeFenced},
		},
		{
			name:  "a power-off command to a healthy node's BMC, refused: the decision is the violation",
			f:     newFacts().skewed("b", -30*time.Second).command("b", "ForceOff", false),
			rules: []string{RuleHealthyNodePowerCommand},
		},
		{
			name:  "an IPMI power down accepted by a healthy node's lying BMC (no power change logged)",
			f:     newFacts().command("b", "power down", true),
			rules: []string{RuleHealthyNodePowerCommand},
		},
		{
			name: "a power-on of a healthy node's BMC, and a power-off of the failed node's: clean",
			f:    newFacts().command("b", "On", true).command("b", "power up", true).command("a", "ForceOff", true),
		},
		{
			name:  "a healthy node fencing: its request reached Fencing, nothing powered off yet",
			f:     newFacts().request("r1", "b", fencingv1alpha1.FencingPhaseTriaged).request("r1", "b", fencingv1alpha1.FencingPhaseFencing).request("r1", "b", fencingv1alpha1.FencingPhaseFenced),
			rules: []string{RuleHealthyNodeFencing},
		},
		{
			name: "a healthy node triaged and cancelled: clean",
			f:    newFacts().request("r1", "b", fencingv1alpha1.FencingPhaseTriaged).requestGone("r1", "b"),
		},
		{
			name:  "a healthy node marked FencingComplete and out of service, reported once",
			f:     newFacts().noBMCs().node("b", corev1.ConditionTrue, fencingComplete, outOfService("fenced")).node("b", corev1.ConditionTrue, fencingComplete),
			rules: []string{RuleHealthyNodeFencing},
		},
		{
			name:  "a pod of a healthy node with a skewed clock deleted by Fenceline",
			f:     newFacts().skewed("b", 30*time.Second).deletedBy("b", "fenceline"),
			rules: []string{RuleHealthyNodePodDeleted},
		},
		{
			name: "fenced on a lying BMC's read-back Off, the lie caught once the node is back",
			f: newFacts().node("a", corev1.ConditionUnknown).lies("a").
				node("a", corev1.ConditionUnknown, fencingComplete, outOfService("fenced")).deleted("a").
				node("a", corev1.ConditionTrue, fencingComplete, outOfService("fenced"), lyingFence),
		},
		{
			name: "fenced on a lying BMC's read-back Off, never caught",
			f: newFacts().node("a", corev1.ConditionUnknown).lies("a").
				node("a", corev1.ConditionUnknown, fencingComplete, outOfService("fenced")).
				node("a", corev1.ConditionTrue, fencingComplete, outOfService("fenced")),
			rules: []string{RuleLyingFenceNotCaught},
		},
		{
			name: "fenced after its BMC was honest again, with no power cut: a fence without an Off",
			f: func() *facts {
				f := newFacts().node("a", corev1.ConditionUnknown).lies("a")
				f.LyingBMC["a"] = Lie{From: f.LyingBMC["a"].From, Until: f.LyingBMC["a"].From.Add(time.Second)}
				return f.node("a", corev1.ConditionUnknown).node("a", corev1.ConditionUnknown).node("a", corev1.ConditionUnknown).node("a", corev1.ConditionUnknown, fencingComplete)
			}(),
			rules: []string{RuleFencedWithoutVerifiedOff},
		},
		{
			name: "fenced before its BMC began to lie: a fence without an Off",
			f: newFacts().node("a", corev1.ConditionUnknown, fencingComplete).lies("a").
				node("a", corev1.ConditionUnknown, fencingComplete),
			rules: []string{RuleFencedWithoutVerifiedOff},
		},
		{
			name: "the operator's taint removed by someone else",
			f: newFacts().noBMCs().operatorAdded("a").node("a", corev1.ConditionUnknown, outOfService(operator)).
				node("a", corev1.ConditionUnknown),
			rules: []string{RuleOperatorTaintRemoved},
		},
		{
			name: "the operator's taint removed by the operator, twice (a flapping node)",
			f: newFacts().noBMCs().operatorAdded("a").node("a", corev1.ConditionUnknown, outOfService(operator)).
				operatorRemoved("a").node("a", corev1.ConditionTrue).
				node("a", corev1.ConditionUnknown, outOfService(operator)).
				operatorRemoved("a").node("a", corev1.ConditionTrue),
		},
		{
			name: "removed by the operator once, then by someone else",
			f: newFacts().noBMCs().operatorAdded("a").node("a", corev1.ConditionUnknown, outOfService(operator)).
				operatorRemoved("a").node("a", corev1.ConditionTrue).
				node("a", corev1.ConditionUnknown, outOfService(operator)).node("a", corev1.ConditionUnknown),
			rules: []string{RuleOperatorTaintRemoved},
		},
		{
			name: "two nodes fenced one after the other: within the storm guard",
			f: newFacts().failed("c").limit(1).request("r1", "a", fencingv1alpha1.FencingPhaseFencing).request("r2", "c", fencingv1alpha1.FencingPhaseTriaged).
				request("r1", "a", fencingv1alpha1.FencingPhaseFenced).request("r2", "c", fencingv1alpha1.FencingPhaseFencing),
		},
		{
			name: "two nodes fencing at once beyond maxConcurrentFencing 1, reported once",
			f: newFacts().failed("c").limit(1).request("r1", "a", fencingv1alpha1.FencingPhaseFencing).request("r2", "c", fencingv1alpha1.FencingPhaseFencing).
				request("r2", "c", fencingv1alpha1.FencingPhaseFencing).request("r1", "a", fencingv1alpha1.FencingPhaseFenced),
			rules: []string{RuleStormGuardConcurrency},
		},
		{
			name: "recorded out of order: the resourceVersions decide",
			f: func() *facts {
				f := newFacts().failed("c").limit(1).request("r1", "a", fencingv1alpha1.FencingPhaseFencing).
					request("r1", "a", fencingv1alpha1.FencingPhaseFenced).request("r2", "c", fencingv1alpha1.FencingPhaseFencing)
				f.Requests[1], f.Requests[2] = f.Requests[2], f.Requests[1]
				return f
			}(),
		},
		{
			name: "a deleted request no longer counts",
			f: newFacts().failed("c").limit(1).request("r1", "a", fencingv1alpha1.FencingPhaseFencing).requestGone("r1", "a").
				request("r2", "c", fencingv1alpha1.FencingPhaseFencing),
		},
		{
			name: "two at once within maxConcurrentFencing 2",
			f:    newFacts().failed("c").limit(2).request("r1", "a", fencingv1alpha1.FencingPhaseFencing).request("r2", "c", fencingv1alpha1.FencingPhaseFencing),
		},
		{
			name: "not judged without a limit (no node fencing)",
			f:    newFacts().failed("c").request("r1", "a", fencingv1alpha1.FencingPhaseFencing).request("r2", "c", fencingv1alpha1.FencingPhaseFencing),
		},
		{
			name: "never two writers, over the audit log",
			f: newFacts().call("ControllerPublishVolume", "a", false).call("NodeStageVolume", "a", false).write("a", "OK").
				call("ControllerUnpublishVolume", "a", true).call("ControllerPublishVolume", "b", false).write("a", "PermissionDenied").write("b", "OK"),
		},
		{
			name: "a plain detach and the zombie's write",
			f: newFacts().call("ControllerPublishVolume", "a", false).call("NodeStageVolume", "a", false).
				call("ControllerUnpublishVolume", "a", false).call("ControllerPublishVolume", "b", false).write("a", "OK"),
			rules: []string{"fence-required", "never-two-writers"},
		},
		{
			name: "the same handle on two drivers is two volumes, each with one writer",
			f: newFacts().call("ControllerPublishVolume", "a", false).call("NodeStageVolume", "a", false).write("a", "OK").
				on(world.SecondDriverName).call("ControllerPublishVolume", "b", false).call("NodeStageVolume", "b", false).write("b", "OK").
				on(world.DriverName).write("a", "OK"),
		},
		{
			name: "a plain detach on the second driver, judged on its own log",
			f: newFacts().call("ControllerPublishVolume", "a", false).call("NodeStageVolume", "a", false).write("a", "OK").
				on(world.SecondDriverName).call("ControllerPublishVolume", "a", false).call("NodeStageVolume", "a", false).
				call("ControllerUnpublishVolume", "a", false).call("ControllerPublishVolume", "b", false).write("a", "OK"),
			rules: []string{"fence-required", "never-two-writers"},
		},
		{
			name:  "a pod of a driver that is not safe-detach deleted under quarantine alone",
			f:     newFacts().notSafeDetach().node("a", corev1.ConditionUnknown, quarantined).deleted("a"),
			rules: []string{RuleNotSafeDetachQuarantined},
		},
		{
			name: "a pod of a driver that is not safe-detach deleted under quarantine and out of service",
			f:    newFacts().noBMCs().notSafeDetach().node("a", corev1.ConditionUnknown, quarantined, outOfService(operator)).deleted("a"),
		},
		{
			name: "a pod of a driver that is not safe-detach gone once its node is back",
			f:    newFacts().notSafeDetach().node("a", corev1.ConditionUnknown, quarantined).node("a", corev1.ConditionTrue, quarantined).deleted("a"),
		},
		{
			name: "a safe-detach driver's pod deleted under quarantine",
			f:    newFacts().node("a", corev1.ConditionUnknown, quarantined).deleted("a"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, f := range Check(tt.f.Facts) {
				got = append(got, f.Rule)
			}
			if !slices.Equal(got, tt.rules) {
				t.Errorf("Check = %v, want %v", Check(tt.f.Facts), tt.rules)
			}
		})
	}
}
