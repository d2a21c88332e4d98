package tainteviction

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

// pick returns one of the values.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// propKeys are the taint keys of the random taints and tolerations.
var propKeys = []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady, "example.com/maintenance", names.ForceEvictionTaint}

// randomTaints draws a node's taints: each key of propKeys one time in two,
// mostly NoExecute, with timeAdded at a whole second within ten minutes
// of testobj.Epoch or (one time in four) none.
func randomTaints(r *rand.Rand) []v1.Taint {
	var out []v1.Taint
	for _, key := range propKeys {
		if r.IntN(2) == 0 {
			continue
		}
		t := v1.Taint{Key: key, Effect: pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoExecute, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule)}
		if r.IntN(4) > 0 {
			t = taint(key, "", t.Effect, ptrTo(testobj.Epoch.Add(time.Duration(r.IntN(600))*time.Second)))
		}
		out = append(out, t)
	}
	r.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

func ptrTo[T any](v T) *T { return &v }

// randomSeen draws the first sightings: one per taint key, within ten
// minutes of testobj.Epoch (before a timeAdded too, for a skewed clock).
func randomSeen(r *rand.Rand) map[string]time.Time {
	seen := map[string]time.Time{}
	for _, key := range propKeys {
		seen[key] = testobj.Epoch.Add(time.Duration(r.IntN(610000)-10000) * time.Millisecond)
	}
	return seen
}

func seenFunc(seen map[string]time.Time) func(v1.Taint) time.Time {
	return func(t v1.Taint) time.Time { return seen[t.Key] }
}

// randomTolerations draws up to three tolerations: a key of propKeys,
// another key or none (every key), operator Exists or Equal (value "" or
// another), effect NoExecute, NoSchedule or any, and tolerationSeconds
// forever, negative, zero or up to ten minutes.
func randomTolerations(r *rand.Rand) []testobj.PodOption {
	var out []testobj.PodOption
	for range r.IntN(4) {
		tol := v1.Toleration{
			Key:      pick(r, append(slices.Clone(propKeys), "example.com/other", "")...),
			Operator: pick(r, v1.TolerationOpExists, v1.TolerationOpEqual),
			Effect:   pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule, ""),
		}
		if tol.Operator == v1.TolerationOpEqual {
			tol.Value = pick(r, "", "", "x")
		}
		switch r.IntN(6) {
		case 0:
		case 1:
			tol.TolerationSeconds = seconds(pick[int64](r, -5, 0))
		default:
			tol.TolerationSeconds = seconds(int64(r.IntN(600)))
		}
		if tol.Key == "" && tol.Operator == v1.TolerationOpEqual {
			tol.Operator = v1.TolerationOpExists
		}
		out = append(out, testobj.Toleration(tol))
	}
	return out
}

// randomPod draws a pod bound to n1 (or n2), scheduled at, or created at, a
// random time or neither, with random tolerations, sometimes terminating,
// sometimes with the evict-when hook, its condition True, False or absent.
func randomPod(r *rand.Rand) *v1.Pod {
	opts := []testobj.PodOption{testobj.OnNode(pick(r, "n1", "n1", "n1", "n1", "n2"))}
	at := testobj.Epoch.Add(time.Duration(r.IntN(900000)-300000) * time.Millisecond)
	switch r.IntN(3) {
	case 0:
		opts = append(opts, testobj.ScheduledAt(at))
	case 1:
		opts = append(opts, testobj.CreatedAt(at))
	}
	opts = append(opts, randomTolerations(r)...)
	if r.IntN(10) == 0 {
		opts = append(opts, testobj.Terminating(testobj.Epoch))
	}
	if r.IntN(5) == 0 {
		opts = append(opts, testobj.PodAnnotation(EvictWhenAnnotation, pick(r, "example.com/Checkpointed", "")))
		switch r.IntN(3) {
		case 0:
			opts = append(opts, testobj.PodCondition("example.com/Checkpointed", v1.ConditionTrue))
		case 1:
			opts = append(opts, testobj.PodCondition("example.com/Checkpointed", v1.ConditionFalse))
		}
	}
	return testobj.Pod("ns", "p", opts...)
}

// boundAtByHand restates when the pod was bound: its PodScheduled=True
// transition, else its creation.
func boundAtByHand(pod *v1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return pod.CreationTimestamp.Time
}

// evictionBounds restates the documented eviction time: never before the
// toleration (the smallest tolerationSeconds of the tolerations that
// matched, each taint taking the first that tolerates it, none or <= 0 for
// an untolerated taint, forever when none sets it) counted from the later
// of the pod's binding and the earliest NoExecute taint (its timeAdded, or
// its first sighting without one), and at most a second later (timeAdded
// is stored to the second).
func evictionBounds(pod *v1.Pod, taints []v1.Taint, seen func(v1.Taint) time.Time) (never bool, lo, hi time.Time) {
	var noExec []v1.Taint
	for _, t := range taints {
		if t.Effect == v1.TaintEffectNoExecute {
			noExec = append(noExec, t)
		}
	}
	if len(noExec) == 0 {
		return true, lo, hi
	}
	d, forever := time.Duration(-1), true
	for i := range noExec {
		var used *v1.Toleration
		for j := range pod.Spec.Tolerations {
			if pod.Spec.Tolerations[j].ToleratesTaint(klog.Background(), &noExec[i], false) {
				used = &pod.Spec.Tolerations[j]
				break
			}
		}
		switch {
		case used == nil:
			d, forever = 0, false
		case used.TolerationSeconds == nil:
		case *used.TolerationSeconds <= 0:
			d, forever = 0, false
		case d < 0 || time.Duration(*used.TolerationSeconds)*time.Second < d:
			d, forever = time.Duration(*used.TolerationSeconds)*time.Second, false
		}
	}
	if forever {
		return true, lo, hi
	}
	var startLo, startHi time.Time
	for _, t := range noExec {
		l, h := seen(t), seen(t)
		if t.TimeAdded != nil {
			l, h = t.TimeAdded.Time, t.TimeAdded.Add(time.Second)
		}
		if startLo.IsZero() || l.Before(startLo) {
			startLo = l
		}
		if startHi.IsZero() || h.Before(startHi) {
			startHi = h
		}
	}
	bound := boundAtByHand(pod)
	if bound.After(startLo) {
		startLo = bound
	}
	if bound.After(startHi) {
		startHi = bound
	}
	return false, startLo.Add(d), startHi.Add(d)
}

// TestEvictAtProperties checks EvictAt over random taints, tolerations,
// bindings and first sightings against the rules of its doc comment and
// docs/taint-eviction.md:
//   - only NoExecute taints evict; none, or all tolerated forever, is never;
//   - a pod never gets less than its toleration, counted from the later of
//     its binding and the earliest NoExecute taint (timeAdded, else the
//     first sighting), and at most a second more;
//   - a later first sighting, a later binding, a longer tolerationSeconds
//     never make the eviction earlier;
//   - the order of the taints and the node's other taints change nothing.
func TestEvictAtProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 2026))
	evicted := 0
	for i := range 20000 {
		pod, taints, seen := randomPod(r), randomTaints(r), randomSeen(r)
		got := EvictAt(pod, taints, seenFunc(seen))
		fail := func(why string) {
			t.Fatalf("case %d: %s\ntaints %v\nseen %v\npod tolerations %+v bound %s\ngot %+v", i, why, taints, seen, pod.Spec.Tolerations, boundAtByHand(pod), got)
		}
		if got.Why == "" {
			fail("no reason")
		}
		never, lo, hi := evictionBounds(pod, taints, seenFunc(seen))
		if got.Never != never {
			fail(fmt.Sprintf("want Never=%v", never))
		}
		if !got.Never {
			evicted++
			if got.At.Before(lo) || got.At.After(hi) {
				fail(fmt.Sprintf("eviction at %s, want within [%s, %s]", got.At, lo, hi))
			}
		}
		same := func(o Eviction) bool { return o.Never == got.Never && o.At.Equal(got.At) }
		notEarlier := func(o Eviction) bool { return got.Never && o.Never || !got.Never && (o.Never || !o.At.Before(got.At)) }

		shuffled := slices.Clone(taints)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		shuffled = append(shuffled, v1.Taint{Key: "example.com/soft", Effect: pick(r, v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule)})
		if o := EvictAt(pod, shuffled, seenFunc(seen)); !same(o) {
			fail(fmt.Sprintf("reordered taints, or another non-NoExecute taint, gave %+v", o))
		}

		later := map[string]time.Time{}
		for k, at := range seen {
			later[k] = at.Add(time.Duration(r.IntN(120000)) * time.Millisecond)
		}
		if o := EvictAt(pod, taints, seenFunc(later)); !notEarlier(o) {
			fail(fmt.Sprintf("later first sightings %v made the eviction earlier: %+v", later, o))
		}

		moved := pod.DeepCopy()
		shift := time.Duration(r.IntN(600)) * time.Second
		moved.CreationTimestamp = metav1.NewTime(moved.CreationTimestamp.Add(shift))
		for j := range moved.Status.Conditions {
			c := &moved.Status.Conditions[j]
			c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Add(shift))
		}
		if o := EvictAt(moved, taints, seenFunc(seen)); !notEarlier(o) {
			fail(fmt.Sprintf("a binding %s later made the eviction earlier: %+v", shift, o))
		}

		if len(pod.Spec.Tolerations) > 0 {
			longer := pod.DeepCopy()
			tol := &longer.Spec.Tolerations[r.IntN(len(longer.Spec.Tolerations))]
			switch {
			case tol.TolerationSeconds == nil:
			case r.IntN(4) == 0:
				tol.TolerationSeconds = nil
			default:
				tol.TolerationSeconds = seconds(max(*tol.TolerationSeconds, 0) + int64(r.IntN(600)))
			}
			if o := EvictAt(longer, taints, seenFunc(seen)); !notEarlier(o) {
				fail(fmt.Sprintf("a longer toleration %+v made the eviction earlier: %+v", *tol, o))
			}
		}
	}
	if evicted < 5000 {
		t.Fatalf("only %d of 20000 random pods evicted: the generator does not exercise it", evicted)
	}
}

// randomNode draws node n1: Ready, NotReady, Unknown or without a Ready
// condition, with random taints, the out-of-service taint or the
// quarantine taint one time in five each, and FencingComplete True one
// time in four.
func randomNode(r *rand.Rand) *v1.Node {
	t0 := testobj.Epoch
	opts := []testobj.NodeOption{pick(r, testobj.ReadySince(t0), testobj.NotReadySince(t0), testobj.UnknownSince(t0), testobj.NoReadyCondition())}
	if r.IntN(5) == 0 {
		opts = append(opts, testobj.TaintAt(names.OutOfServiceTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule), t0))
	}
	if r.IntN(5) == 0 {
		opts = append(opts, testobj.TaintAt(names.QuarantineTaint, v1.TaintEffectNoSchedule, t0))
	}
	if r.IntN(4) == 0 {
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))
	}
	n := testobj.Node("n1", opts...)
	n.Spec.Taints = append(n.Spec.Taints, randomTaints(r)...)
	return n
}

// TestDecidePodProperties checks DecidePod over random pods, nodes and
// times, with the node's cut-off reason as the controller computes it,
// against the rules of its doc comment and docs/taint-eviction.md:
//   - a missing pod or node, a pod bound elsewhere or already terminating
//     is left alone;
//   - an eviction acts only once due (EvictAt), waits until then, and a
//     later now never changes the time nor undoes an action that was due;
//   - a graceful eviction only on a Ready node or for a stateless pod, and
//     only once the evict-when condition (if asked for) is True;
//   - a force deletion only of a stateful pod on a node that is not Ready
//     and is cut off by a fence or an out-of-service taint (the node
//     really carries it), and then always, whatever the evict-when hook;
//   - a stateful pod on a node that is not Ready is evicted gracefully
//     only when every stateful volume is of a safe-detach driver and the
//     node is not cut off yet (quarantine recovers it from Terminating),
//     and then always once due, unless its evict-when hook holds it.
func TestDecidePodProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(72, 2026))
	count := map[Action]int{}
	for i := range 20000 {
		in := PodInput{Pod: randomPod(r), Node: randomNode(r), Stateful: r.IntN(2) == 0}
		if r.IntN(20) == 0 {
			in.Pod = nil
		}
		if r.IntN(20) == 0 {
			in.Node = nil
		}
		safe := r.IntN(2) == 0
		in.CutOff, in.SafeDetach = cutoff.NodeReason(in.Node, safe), safe
		seen := randomSeen(r)
		in.Seen = seenFunc(seen)
		in.Now = testobj.Epoch.Add(time.Duration(r.IntN(1800)-300) * time.Second)
		got := DecidePod(in)
		count[got.Action]++
		fail := func(why string) {
			var taints []v1.Taint
			var conds []v1.NodeCondition
			if in.Node != nil {
				taints, conds = in.Node.Spec.Taints, in.Node.Status.Conditions
			}
			t.Fatalf("case %d: %s\nnode taints %v conditions %v\npod %+v\nstateful %v cut off %q seen %v now %s\ngot %+v",
				i, why, taints, conds, in.Pod, in.Stateful, in.CutOff, seen, in.Now, got)
		}
		if got.Why == "" {
			fail("no reason")
		}
		if in.Pod == nil || in.Node == nil || in.Pod.Spec.NodeName != in.Node.Name || in.Pod.DeletionTimestamp != nil {
			if got.Action != ActionNone {
				fail("acted on a pod that is gone, elsewhere or already being deleted, or on a gone node")
			}
			continue
		}
		e := EvictAt(in.Pod, in.Node.Spec.Taints, in.Seen)
		if e.Never != (got.Action == ActionNone) {
			fail(fmt.Sprintf("EvictAt says %+v", e))
		}
		if got.Action == ActionNone {
			continue
		}
		if !got.At.Equal(e.At) || (got.Action == ActionWait) != in.Now.Before(e.At) {
			fail(fmt.Sprintf("acted before the eviction was due, or waited after it (%s)", e.At))
		}
		ready := false
		for _, c := range in.Node.Status.Conditions {
			ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
		}
		cutOff := in.CutOff == cutoff.ReasonFenced || in.CutOff == cutoff.ReasonOutOfService
		switch got.Action {
		case ActionEvict:
			if !ready && in.Stateful && !(in.SafeDetach && in.CutOff == cutoff.ReasonNone) {
				fail("a stateful pod of a node that is not Ready evicted gracefully, not all safe-detach or already cut off")
			}
			if c, ok := in.Pod.Annotations[EvictWhenAnnotation]; ok && (c == "" || !podConditionTrue(in.Pod, c)) {
				fail("evicted before the evict-when condition is True")
			}
		case ActionForceDelete:
			if ready || !in.Stateful || !cutOff {
				fail("force-deleted a pod that is stateless, or on a Ready node, or on a node not cut off by a fence or out of service")
			}
			fencedOrOOS := false
			for _, taint := range in.Node.Spec.Taints {
				fencedOrOOS = fencedOrOOS || taint.Key == names.OutOfServiceTaint
			}
			for _, c := range in.Node.Status.Conditions {
				fencedOrOOS = fencedOrOOS || (string(c.Type) == names.FencingCompleteCondition && c.Status == v1.ConditionTrue)
			}
			if !fencedOrOOS {
				fail("force-deleted on a node that carries neither FencingComplete=True nor the out-of-service taint")
			}
		}
		if got.Action != ActionWait && !ready && in.Stateful && cutOff && got.Action != ActionForceDelete {
			fail("a due stateful pod of a dead node cut off from storage is not force-deleted")
		}
		_, hooked := in.Pod.Annotations[EvictWhenAnnotation]
		if got.Action != ActionWait && !ready && in.Stateful && in.SafeDetach && in.CutOff == cutoff.ReasonNone && !hooked && got.Action != ActionEvict {
			fail("a due stateful pod of safe-detach drivers on a dead node not cut off is not handed to quarantine (evicted)")
		}
		later := in
		later.Now = in.Now.Add(time.Duration(r.IntN(3600)) * time.Second)
		if again := DecidePod(later); !again.At.Equal(got.At) || (got.Action != ActionWait && again.Action != got.Action) {
			fail(fmt.Sprintf("at the later %s: %+v", later.Now, again))
		}
	}
	for _, a := range []Action{ActionNone, ActionWait, ActionEvict, ActionForceDelete, ActionHold} {
		if count[a] < 300 {
			t.Fatalf("action %q drawn only %d times: the generator does not exercise it (%v)", a, count[a], count)
		}
	}
}
