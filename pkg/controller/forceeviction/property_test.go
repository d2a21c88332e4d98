package forceeviction

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/podutil"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// propGrace is the readiness grace of the properties, and propNow the
// instant around which their times are drawn.
const propGrace = 50 * time.Second

var propNow = testobj.Epoch.Add(time.Hour)

// randomTime draws an instant within spread of propNow, to the
// millisecond.
func randomTime(r *rand.Rand, spread time.Duration) time.Time {
	ms := int64(spread / time.Millisecond)
	return propNow.Add(time.Duration(r.Int64N(2*ms+1)-ms) * time.Millisecond)
}

// randomNode draws node n1: Ready, NotReady, Unknown or without a Ready
// condition since a random time, with the force-eviction key under any
// effect (or not at all), other taints, volumes listed in volumesInUse and
// volumesAttached. It is nil one time in twenty.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(20) == 0 {
		return nil
	}
	since := randomTime(r, 3*time.Minute)
	opts := []testobj.NodeOption{[]testobj.NodeOption{
		testobj.ReadySince(since), testobj.NotReadySince(since), testobj.UnknownSince(since), testobj.NoReadyCondition(),
	}[r.IntN(4)]}
	switch r.IntN(6) {
	case 0:
	case 1:
		opts = append(opts, testobj.TaintAt(names.ForceEvictionTaint, []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule}[r.IntN(2)], since))
	default:
		opts = append(opts, testobj.TaintAt(names.ForceEvictionTaint, v1.TaintEffectNoExecute, since))
	}
	if r.IntN(3) == 0 {
		opts = append(opts, testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, since))
	}
	vol := nodeutil.CSIUniqueVolumeName("d", "h")
	if r.IntN(2) == 0 {
		opts = append(opts, testobj.VolumesInUse(vol))
	}
	if r.IntN(2) == 0 {
		opts = append(opts, testobj.VolumesAttached(vol))
	}
	return testobj.Node("n1", opts...)
}

// randomLease draws n1's Lease, renewed at a random time (in the future
// too, for a skewed clock), without renewTime, or none.
func randomLease(r *rand.Rand) *coordinationv1.Lease {
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		return &coordinationv1.Lease{}
	}
	return testobj.Lease("n1", randomTime(r, 2*propGrace))
}

// randomPod draws a pod on n1 (or another node), running, terminating or
// force-deleted, tolerating the force-eviction taint, everything, another
// key, or nothing. It is nil one time in twenty.
func randomPod(r *rand.Rand) *v1.Pod {
	if r.IntN(20) == 0 {
		return nil
	}
	opts := []testobj.PodOption{testobj.OnNode([]string{"n1", "n1", "n1", "n2"}[r.IntN(4)])}
	switch r.IntN(5) {
	case 0:
		opts = append(opts, testobj.Terminating(testobj.Epoch))
	case 1:
		opts = append(opts, testobj.ForceDeleted(testobj.Epoch))
	}
	switch r.IntN(6) {
	case 0:
		opts = append(opts, testobj.Tolerate(names.ForceEvictionTaint))
	case 1:
		opts = append(opts, testobj.Tolerate(""))
	case 2:
		opts = append(opts, testobj.Tolerate(v1.TaintNodeUnreachable))
	case 3:
		opts = append(opts, testobj.Toleration(v1.Toleration{Key: names.ForceEvictionTaint, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.Mirror())
	}
	return testobj.Pod("ns", "p", opts...)
}

// renewedSince returns how long ago the Lease was renewed, false when it
// carries no renewal.
func renewedSince(l *coordinationv1.Lease, now time.Time) (time.Duration, bool) {
	if l == nil || l.Spec.RenewTime == nil {
		return 0, false
	}
	return now.Sub(l.Spec.RenewTime.Time), true
}

// readyTrue restates "the node is Ready" from its conditions.
func readyTrue(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// describe prints what the decisions read of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{conditions %v taints %v volumesInUse %v volumesAttached %v annotations %v}",
		n.Status.Conditions, n.Spec.Taints, n.Status.VolumesInUse, n.Status.VolumesAttached, n.Annotations)
}

func describeLease(l *coordinationv1.Lease) string {
	if l == nil {
		return "<none>"
	}
	return fmt.Sprintf("{renewTime %v}", l.Spec.RenewTime)
}

// TestKubeletLivenessProperties checks KubeletLiveness against the rule of
// force eviction: the kubelet is alive when the node is Ready or its Lease
// was renewed less than the grace ago; a missing Lease, or one never
// renewed, is no evidence of life; After is how long a fresh Lease keeps
// it alive, and it is dead from then on (a later now never revives a
// kubelet that did not renew); a longer grace never kills a live kubelet.
func TestKubeletLivenessProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 2026))
	alive := 0
	for i := range 10000 {
		node := randomNode(r)
		if node == nil {
			node = testobj.Node("n1")
		}
		lease, now := randomLease(r), randomTime(r, time.Minute)
		grace := time.Duration(1+r.IntN(90)) * time.Second
		got := KubeletLiveness(node, lease, now, grace)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s lease %s now %s grace %s\ngot %+v", i, why, describe(node), describeLease(lease), now, grace, got)
		}
		since, renewed := renewedSince(lease, now)
		want := readyTrue(node) || (renewed && since < grace)
		if got.Alive != want || got.Why == "" {
			fail(fmt.Sprintf("want Alive=%v with a reason", want))
		}
		switch {
		case got.Alive && !readyTrue(node):
			alive++
			if got.After != grace-since || got.After <= 0 {
				fail(fmt.Sprintf("alive on its Lease, want After %s", grace-since))
			}
			if KubeletLiveness(node, lease, now.Add(got.After-time.Millisecond), grace).Alive != true {
				fail("dead before After")
			}
			if KubeletLiveness(node, lease, now.Add(got.After), grace).Alive {
				fail("still alive at After without a renewal")
			}
		case got.Alive:
			if got.After != 0 {
				fail("a Ready node is alive with no expiry")
			}
		default:
			if got.After != 0 {
				fail("a dead kubelet with an After")
			}
			if KubeletLiveness(node, lease, now.Add(time.Duration(r.IntN(3600))*time.Second), grace).Alive {
				fail("a later now revived a kubelet that did not renew")
			}
		}
		if got.Alive && !KubeletLiveness(node, lease, now, grace+time.Duration(r.IntN(60))*time.Second).Alive {
			fail("a longer grace killed a live kubelet")
		}
	}
	if alive < 500 {
		t.Fatalf("only %d NotReady nodes alive on their Lease: the generator does not exercise it", alive)
	}
}

// TestDecidePodProperties checks DecidePod over random nodes, pods and
// Leases against its rule: a pod is force-deleted only when it exists, is
// bound to the node, the node exists and carries the force-eviction taint
// with effect NoExecute, the node is not Ready and its Lease is missing
// or was not renewed for the grace, the pod does not tolerate the taint
// and was not already force-deleted; and then it always is. A decision
// to delete holds at any later now, and under any older renewal of the
// Lease (an earlier heartbeat is no more evidence of life); a longer grace
// never deletes what a shorter one keeps. While a pod of the node is being
// deleted, DecideNode neither removes the taint nor releases the volumes.
func TestDecidePodProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 2026))
	deleted := 0
	for i := range 20000 {
		node, pod, lease := randomNode(r), randomPod(r), randomLease(r)
		now := randomTime(r, time.Minute)
		got := DecidePod(node, pod, lease, now, propGrace)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s\npod %+v\nlease %s now %s\ngot %+v", i, why, describe(node), pod, describeLease(lease), now, got)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		want := false
		if node != nil && pod != nil && pod.Spec.NodeName == node.Name && cutoff.HasForceEvictionTaint(node) {
			since, renewed := renewedSince(lease, now)
			taint := v1.Taint{Key: names.ForceEvictionTaint, Effect: v1.TaintEffectNoExecute}
			want = !readyTrue(node) && (!renewed || since >= propGrace) && !podutil.ToleratesTaint(pod, &taint) && !podutil.IsForceDeleted(pod)
		}
		if got.Delete != want {
			fail(fmt.Sprintf("want Delete=%v", want))
		}
		if !got.Delete {
			continue
		}
		deleted++
		if KubeletLiveness(node, lease, now, propGrace).Alive {
			fail("deleted a pod of a node whose kubelet is alive")
		}
		if d := DecideNode(NodeState{Node: node, Lease: lease, Remaining: 1 + r.IntN(3), VAs: r.IntN(3), Evicted: r.IntN(2) == 0, TaintSince: randomTime(r, 3*time.Minute)}, now, propGrace); d.Untaint || d.ReleaseVolumes {
			fail(fmt.Sprintf("DecideNode untaints or releases the node while its pods are force-deleted: %+v", d))
		}
		if later := now.Add(time.Duration(r.IntN(3600)) * time.Second); !DecidePod(node, pod, lease, later, propGrace).Delete {
			fail(fmt.Sprintf("not deleted any more at the later %s", later))
		}
		if lease != nil && lease.Spec.RenewTime != nil {
			older := testobj.Lease("n1", lease.Spec.RenewTime.Add(-time.Duration(r.IntN(600))*time.Second))
			if !DecidePod(node, pod, older, now, propGrace).Delete {
				fail("an older renewal of the Lease stopped the deletion")
			}
		}
		if shorter := time.Duration(r.IntN(int(propGrace/time.Second))) * time.Second; !DecidePod(node, pod, lease, now, shorter).Delete {
			fail(fmt.Sprintf("a shorter grace (%s) kept a pod a longer one deletes", shorter))
		}
	}
	if deleted < 500 {
		t.Fatalf("only %d of 20000 random pods deleted: the generator does not exercise deletion", deleted)
	}
}

// randomNodeState draws what DecideNode looks at: a node, its Lease, the
// pods left, the VolumeAttachments (those of evicted volumes among them),
// whether the eviction started, and when the taint was first seen.
func randomNodeState(r *rand.Rand) NodeState {
	s := NodeState{Node: randomNode(r), Lease: randomLease(r), Remaining: max(0, r.IntN(5)-2), VAs: max(0, r.IntN(5)-2), Evicted: r.IntN(2) == 0}
	if s.Evicted && s.VAs > 0 {
		s.EvictedVAs = r.IntN(s.VAs + 1)
	}
	s.TaintSince = randomTime(r, 3*time.Minute)
	return s
}

// TestDecideNodeProperties checks DecideNode over random node states
// against the rules of its doc comment (the proposal's scenarios 1-3):
//   - nothing is released or untainted for a gone node or one without the
//     taint (effect NoExecute);
//   - the volume lists are released only while the kubelet shows no sign
//     of life and no pod is left;
//   - the taint stays while a VolumeAttachment of an evicted pod's volume
//     remains, and, while the kubelet is dead, while any VolumeAttachment
//     or listed volume remains; a Ready node that has been Ready since
//     before the taint keeps it for the grace unless something was
//     evicted; a NotReady node with a fresh Lease keeps it while nothing
//     was evicted;
//   - the record of evicted volumes is cleared only with the taint or once
//     it is gone;
//   - a decision that waits (After) neither untaints nor releases;
//   - a release on a dead kubelet still holds at any later now.
func TestDecideNodeProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 2026))
	count := map[string]int{}
	for i := range 20000 {
		s := randomNodeState(r)
		now := randomTime(r, time.Minute)
		got := DecideNode(s, now, propGrace)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s lease %s\nstate remaining %d VAs %d evicted %v evictedVAs %d taintSince %s now %s\ngot %+v",
				i, why, describe(s.Node), describeLease(s.Lease), s.Remaining, s.VAs, s.Evicted, s.EvictedVAs, s.TaintSince, now, got)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		tainted := cutoff.HasForceEvictionTaint(s.Node)
		if !tainted {
			if got.Untaint || got.ReleaseVolumes || got.ClearRecord != (s.Node != nil && s.Evicted) {
				fail("no taint (or no node): only the record of an earlier eviction may go")
			}
			continue
		}
		since, renewed := renewedSince(s.Lease, now)
		dead := !readyTrue(s.Node) && (!renewed || since >= propGrace)
		listed := len(s.Node.Status.VolumesInUse) > 0 || len(s.Node.Status.VolumesAttached) > 0
		if got.ReleaseVolumes {
			count["release"]++
			if !dead || s.Remaining > 0 || !listed {
				fail("volumes released while the kubelet may be alive, pods remain, or nothing is listed")
			}
			if later := now.Add(time.Duration(r.IntN(3600)) * time.Second); !DecideNode(s, later, propGrace).ReleaseVolumes {
				fail("release no longer decided at a later now")
			}
		}
		if got.Untaint {
			count["untaint"]++
			if s.Evicted && s.EvictedVAs > 0 {
				fail("untainted while a VolumeAttachment of an evicted pod remains")
			}
			if dead && (s.Remaining > 0 || s.VAs > 0 || listed) {
				fail("untainted a dead kubelet's node before its pods and volumes are gone")
			}
			if !dead && !s.Evicted {
				if !readyTrue(s.Node) {
					fail("untainted a NotReady node whose Lease is fresh before anything was evicted")
				}
				cond := nodeutil.ReadyCondition(s.Node)
				if !cond.LastTransitionTime.Time.After(s.TaintSince) && now.Sub(s.TaintSince) < propGrace {
					fail("untainted a node Ready since before the taint within the grace")
				}
			}
		}
		if got.ClearRecord && !got.Untaint {
			fail("the record of evicted volumes cleared while the taint stays")
		}
		if got.After > 0 && (got.Untaint || got.ReleaseVolumes) {
			fail("a decision that waits also acts")
		}
	}
	if count["release"] < 200 || count["untaint"] < 200 {
		t.Fatalf("releases and untaints drawn too rarely: %v", count)
	}
}
