package podgc

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// pick returns one of the values.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// randomNode draws node n1 (n2 one time in ten), nil one time in twenty:
// Ready, NotReady, Unknown or without a Ready condition, with the
// out-of-service taint under any effect or not at all, other taints, and a
// FencingComplete condition True, False, Unknown or absent.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(20) == 0 {
		return nil
	}
	t0 := testobj.Epoch
	opts := []testobj.NodeOption{pick(r, testobj.ReadySince(t0), testobj.NotReadySince(t0), testobj.UnknownSince(t0), testobj.NoReadyCondition())}
	if r.IntN(3) > 0 {
		opts = append(opts, testobj.TaintAt(names.OutOfServiceTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule), t0))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.Taint(pick(r, v1.TaintNodeUnreachable, names.QuarantineTaint, names.ForceEvictionTaint), v1.TaintEffectNoExecute))
	}
	switch r.IntN(4) {
	case 0:
		// Fenced before, at or after the Ready condition's transition
		// (a stale Ready, or a node back), or with no time at all.
		opts = append(opts, pick(r,
			testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(time.Minute)),
			testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0),
			testobj.ConditionSince(names.FencingCompleteCondition, v1.ConditionTrue, t0.Add(-time.Minute)),
			testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue)))
	case 1:
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, pick(r, v1.ConditionFalse, v1.ConditionUnknown)))
	}
	return testobj.Node(pick(r, "n1", "n1", "n1", "n1", "n1", "n1", "n1", "n1", "n1", "n2"), opts...)
}

// randomPod draws a pod bound to n1 (or n2), nil one time in twenty,
// running, terminating or already force-deleted, sometimes a mirror pod, a
// DaemonSet's, or tolerating the out-of-service taint or everything.
func randomPod(r *rand.Rand) *v1.Pod {
	if r.IntN(20) == 0 {
		return nil
	}
	opts := []testobj.PodOption{testobj.OnNode(pick(r, "n1", "n1", "n1", "n2"))}
	switch r.IntN(5) {
	case 0:
	case 1:
		opts = append(opts, testobj.ForceDeleted(testobj.Epoch))
	default:
		opts = append(opts, testobj.Terminating(testobj.Epoch))
	}
	switch r.IntN(6) {
	case 0:
		opts = append(opts, testobj.Mirror())
	case 1:
		opts = append(opts, testobj.OwnedBy("DaemonSet", "ds"))
	}
	return testobj.Pod("ns", "p", opts...)
}

// describe prints what Decide reads of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{name %s conditions %v taints %v}", n.Name, n.Status.Conditions, n.Spec.Taints)
}

// conditionTrue restates whether the node's condition of the type is True.
func conditionTrue(n *v1.Node, typ string) bool {
	for _, c := range n.Status.Conditions {
		if string(c.Type) == typ {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// TestDecideProperties checks Decide and Down over random nodes and pods
// against the rule of the package (upstream's gcTerminating, plus a fenced
// node): a pod is force-deleted exactly when it and its node exist, it is
// bound to that node, the node carries the out-of-service key (any value,
// any effect) and is down (its Ready condition is not True, or
// FencingComplete is True), and the pod is terminating and not already
// force-deleted. In particular a Ready node that is not fenced never has a
// pod force-deleted. Tolerations do not matter (the human vouched for the
// node), and Recheck, the write-time check, says the same as Decide.
func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 2026))
	deleted := 0
	for i := range 20000 {
		node, pod := randomNode(r), randomPod(r)
		got := Decide(node, pod)
		fail := func(why string) { t.Fatalf("case %d: %s\nnode %s\npod %+v\ngot %+v", i, why, describe(node), pod, got) }
		if got.Why == "" {
			fail("a decision without a reason")
		}
		if node != nil {
			down := !conditionTrue(node, string(v1.NodeReady)) || fencedSinceReady(node)
			if cutoff.NodeDown(node) != down {
				fail(fmt.Sprintf("cutoff.NodeDown() = %v, want %v", cutoff.NodeDown(node), down))
			}
		}
		want := false
		if node != nil && pod != nil && pod.Spec.NodeName == node.Name {
			oos := false
			for _, taint := range node.Spec.Taints {
				oos = oos || taint.Key == names.OutOfServiceTaint
			}
			terminating := pod.DeletionTimestamp != nil
			forceDeleted := terminating && pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
			want = oos && cutoff.NodeDown(node) && terminating && !forceDeleted
		}
		if got.Delete != want {
			fail(fmt.Sprintf("want Delete=%v", want))
		}
		if got.Delete && conditionTrue(node, string(v1.NodeReady)) && !fencedSinceReady(node) {
			fail("force-deleted a pod of a Ready node that is not fenced, or that came back after its fence")
		}
		if del, why := Recheck(node, pod); del != got.Delete || why != got.Why {
			fail(fmt.Sprintf("Recheck() = %v, %q", del, why))
		}
		if pod != nil {
			tolerant := pod.DeepCopy()
			testobj.Tolerate("")(tolerant)
			if Decide(node, tolerant).Delete != got.Delete {
				fail("a toleration changed the decision")
			}
		}
		if got.Delete {
			deleted++
		}
	}
	if deleted < 1000 {
		t.Fatalf("only %d of 20000 random pods deleted: the generator does not exercise deletion", deleted)
	}
}

// fencedSinceReady restates the rule for a Ready node: FencingComplete is
// True and turned True strictly after Ready did (Ready is stale).
func fencedSinceReady(node *v1.Node) bool {
	var ready, fenced *v1.NodeCondition
	for i, c := range node.Status.Conditions {
		switch string(c.Type) {
		case string(v1.NodeReady):
			ready = &node.Status.Conditions[i]
		case names.FencingCompleteCondition:
			fenced = &node.Status.Conditions[i]
		}
	}
	return ready != nil && fenced != nil && fenced.Status == v1.ConditionTrue &&
		fenced.LastTransitionTime.After(ready.LastTransitionTime.Time)
}
