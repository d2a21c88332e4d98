package cutoff

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// randomNode draws a node that is Ready, NotReady, Unknown or without a
// Ready condition, with any of Fenceline's taint keys and the
// out-of-service key under any effect (so that a key with a foreign effect
// comes up often), a FencingComplete condition True, False or absent, and
// unrelated taints. It is nil one time in ten.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(10) == 0 {
		return nil
	}
	t0 := testobj.Epoch
	opts := []testobj.NodeOption{[]testobj.NodeOption{
		testobj.ReadySince(t0), testobj.NotReadySince(t0), testobj.UnknownSince(t0), testobj.NoReadyCondition(),
	}[r.IntN(4)]}
	effects := []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}
	for _, key := range []string{names.OutOfServiceTaint, names.QuarantineTaint, names.ForceEvictionTaint, v1.TaintNodeUnreachable, "example.com/other"} {
		if r.IntN(3) == 0 {
			opts = append(opts, testobj.TaintAt(key, effects[r.IntN(len(effects))], t0.Add(time.Duration(r.IntN(600))*time.Second)))
		}
	}
	switch r.IntN(3) {
	case 0:
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, v1.ConditionTrue))
	case 1:
		opts = append(opts, testobj.Condition(names.FencingCompleteCondition, []v1.ConditionStatus{v1.ConditionFalse, v1.ConditionUnknown}[r.IntN(2)]))
	}
	return testobj.Node("node-1", opts...)
}

// describe prints what NodeReason reads of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{conditions %v taints %v}", n.Status.Conditions, n.Spec.Taints)
}

// expectedReason restates the cut-off rule of NodeReason from the node's
// raw fields, without the helpers NodeReason uses, in the documented order.
func expectedReason(node *v1.Node, safeDetach bool) Reason {
	if node == nil {
		return ReasonNodeGone
	}
	ready, oos, quarantined, evicting, fenced := false, false, false, false, false
	for _, c := range node.Status.Conditions {
		switch string(c.Type) {
		case string(v1.NodeReady):
			ready = c.Status == v1.ConditionTrue
		case names.FencingCompleteCondition:
			fenced = c.Status == v1.ConditionTrue
		}
	}
	for _, t := range node.Spec.Taints {
		oos = oos || t.Key == names.OutOfServiceTaint
		quarantined = quarantined || (t.Key == names.QuarantineTaint && t.Effect == v1.TaintEffectNoSchedule)
		evicting = evicting || (t.Key == names.ForceEvictionTaint && t.Effect == v1.TaintEffectNoExecute)
	}
	switch {
	case oos:
		return ReasonOutOfService
	case safeDetach && !ready && quarantined:
		return ReasonSafeDetach
	case !ready && evicting:
		return ReasonForceEviction
	case fenced:
		return ReasonFenced
	}
	return ReasonNone
}

// TestNodeReasonProperties checks NodeReason over random nodes against the
// cut-off rule stated in its doc comment and in docs/attacher.md: a gone
// node is node-gone; the out-of-service key counts under any effect and
// even on a Ready node; quarantine (NoSchedule, opted-in driver) and force
// eviction (NoExecute) count only on a node that is not Ready, and never
// under a foreign effect; FencingComplete=True counts; the first reason in
// that order wins. Opting into safe detach never takes a reason away, and
// changes the answer only to safe-detach. Only out-of-service,
// force-eviction and fenced are vouched.
func TestNodeReasonProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 2026))
	seen := map[Reason]int{}
	for i := range 10000 {
		node := randomNode(r)
		without, with := NodeReason(node, false), NodeReason(node, true)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s\nNodeReason(false)=%q NodeReason(true)=%q", i, why, describe(node), without, with)
		}
		if want := expectedReason(node, false); without != want {
			fail(fmt.Sprintf("not opted in: want %q", want))
		}
		if want := expectedReason(node, true); with != want {
			fail(fmt.Sprintf("opted in: want %q", want))
		}
		if without != ReasonNone && with == ReasonNone {
			fail("opting into safe detach took a reason away")
		}
		if with != without && with != ReasonSafeDetach {
			fail("opting into safe detach changed the reason to something else than safe-detach")
		}
		if (node == nil) != (with == ReasonNodeGone) {
			fail("node-gone is for a missing Node and only for it")
		}
		vouched := with == ReasonOutOfService || with == ReasonForceEviction || with == ReasonFenced
		if with.Vouched() != vouched {
			fail("Vouched() disagrees with the documented vouched reasons")
		}
		seen[with]++
	}
	for _, reason := range []Reason{ReasonNone, ReasonOutOfService, ReasonSafeDetach, ReasonForceEviction, ReasonFenced, ReasonNodeGone} {
		if seen[reason] < 100 {
			t.Fatalf("reason %q drawn only %d times: the generator does not exercise it (%v)", reason, seen[reason], seen)
		}
	}
}

// The heartbeat Leases of randomAttacherInput belong to propDriver, to a
// driver whose name sanitizes to the same Lease name and label, or carry
// no driver annotation at all.
const (
	propDriver      = "disk.example.com"
	collidingDriver = "disk-example.com"
)

var propNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// randomAttacherInput draws heartbeat Leases (renewed in the past or the
// future, stale or fresh, with or without UNPUBLISH_FENCE, without
// renewTime or leaseDurationSeconds, nil entries) and a CSIDriver that is
// missing or has attachRequired nil, true or false.
func randomAttacherInput(r *rand.Rand) ([]*coordinationv1.Lease, *storagev1.CSIDriver) {
	var leases []*coordinationv1.Lease
	for range r.IntN(5) {
		if r.IntN(12) == 0 {
			leases = append(leases, nil)
			continue
		}
		driver := []string{propDriver, propDriver, propDriver, collidingDriver}[r.IntN(4)]
		renew := propNow.Add(time.Duration(r.IntN(80)-60) * time.Second)
		l := testobj.Heartbeat("kube-system", driver, renew, testobj.LeaseDuration(time.Duration(r.IntN(40)-2)*time.Second))
		switch r.IntN(10) {
		case 0:
			l.Annotations[names.HeartbeatUnpublishFenceAnnotation] = "false"
		case 1:
			delete(l.Annotations, names.HeartbeatUnpublishFenceAnnotation)
		case 2:
			l.Spec.RenewTime = nil
		case 3:
			l.Spec.LeaseDurationSeconds = nil
		case 4:
			delete(l.Annotations, names.HeartbeatDriverAnnotation)
		}
		leases = append(leases, l)
	}
	var d *storagev1.CSIDriver
	switch r.IntN(6) {
	case 0:
	case 1:
		d = testobj.AttachRequired(testobj.CSIDriver(propDriver, nil), false)
	case 2:
		d = testobj.AttachRequired(testobj.CSIDriver(propDriver, nil), true)
	default:
		d = testobj.CSIDriver(propDriver, nil)
	}
	return leases, d
}

// observe gives each Lease an observation: seen renewed up to 30 s before
// or after the renewTime its writer's clock stamped (clock skew and watch
// delay), or, now and then, only found in the reader's first list.
func observe(r *rand.Rand, leases []*coordinationv1.Lease) []Heartbeat {
	out := make([]Heartbeat, 0, len(leases))
	for _, l := range leases {
		h := Heartbeat{Lease: l, Renewed: r.IntN(8) != 0}
		if l != nil && l.Spec.RenewTime != nil {
			h.ObservedAt = l.Spec.RenewTime.Add(time.Duration(r.IntN(60000)-30000) * time.Millisecond)
		}
		out = append(out, h)
	}
	return out
}

// freshUntil restates when a heartbeat's evidence expires and whether it
// counts at now: a renewTime and a positive duration, a renewal seen
// happen, not yet expired counted from its observation (never later than
// now), whatever renewTime says.
func freshUntil(h Heartbeat, now time.Time) (time.Time, bool) {
	l := h.Lease
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 || !h.Renewed || h.ObservedAt.IsZero() {
		return time.Time{}, false
	}
	observed := h.ObservedAt
	if observed.After(now) {
		observed = now
	}
	expiry := observed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return expiry, expiry.After(now)
}

// TestAttacherServesProperties checks AttacherServes over random heartbeat
// Leases and CSIDrivers against the rule of its doc comment: it serves only
// with a CSIDriver whose attachRequired is not false, at least one fresh
// Lease of exactly the driver that reports UNPUBLISH_FENCE, and no fresh
// Lease of the driver that does not (one vetoes); Until is the latest
// expiry of those Leases and the evidence never outlives it; a refusal
// says what is missing; Leases of other drivers and the order of the
// Leases change nothing; a missing CSIDriver or no Lease never serves.
func TestAttacherServesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 2026))
	serving := 0
	for i := range 10000 {
		leaseList, driver := randomAttacherInput(r)
		leases := observe(r, leaseList)
		now := propNow.Add(time.Duration(r.IntN(20000)-10000) * time.Millisecond)
		got := AttacherServes(propDriver, leases, driver, now)
		fail := func(why string) {
			t.Fatalf("case %d at %s: %s\nleases %s\ndriver %+v\ngot %+v", i, now, why, describeLeases(leaseList), driver, got)
		}

		var until time.Time
		fencing, veto := false, false
		var ours []Heartbeat
		for _, h := range leases {
			l := h.Lease
			if l == nil || l.Annotations[names.HeartbeatDriverAnnotation] != propDriver {
				continue
			}
			ours = append(ours, h)
			expiry, fresh := freshUntil(h, now)
			switch {
			case !fresh:
			case l.Annotations[names.HeartbeatUnpublishFenceAnnotation] != "true":
				veto = true
			default:
				fencing = true
				if expiry.After(until) {
					until = expiry
				}
			}
		}
		driverOK := driver != nil && (driver.Spec.AttachRequired == nil || *driver.Spec.AttachRequired)
		if want := driverOK && fencing && !veto; got.Serving != want {
			fail(fmt.Sprintf("Serving=%v, want %v (CSIDriver usable %v, fresh fencing Lease %v, fresh veto %v)", got.Serving, want, driverOK, fencing, veto))
		}
		if got.Serving && (got.Missing != "" || !got.Until.Equal(until) || !got.Until.After(now)) {
			fail(fmt.Sprintf("serving, want no Missing and Until %s after now", until))
		}
		if !got.Serving && (got.Missing == "" || !got.Until.IsZero()) {
			fail("refused without saying what is missing, or with an Until")
		}
		if other := AttacherServes(propDriver, ours, driver, now); other.Serving != got.Serving || !other.Until.Equal(got.Until) {
			fail(fmt.Sprintf("Leases of other drivers changed the verdict: without them %+v", other))
		}
		shuffled := append([]Heartbeat(nil), leases...)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if other := AttacherServes(propDriver, shuffled, driver, now); other.Serving != got.Serving || !other.Until.Equal(got.Until) {
			fail(fmt.Sprintf("the order of the Leases changed the verdict: shuffled %+v", other))
		}
		if AttacherServes(propDriver, nil, driver, now).Serving || AttacherServes(propDriver, leases, nil, now).Serving {
			fail("served without any Lease or without a CSIDriver")
		}
		if got.Serving {
			serving++
			// Nothing renewed after now: the evidence goes stale at Until.
			past := true
			for _, h := range leases {
				past = past && !h.ObservedAt.After(now)
			}
			later := got.Until.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			if past && AttacherServes(propDriver, leases, driver, later).Serving {
				fail(fmt.Sprintf("still served at %s, at or after Until, with no renewal since", later))
			}
		}
	}
	if serving < 500 {
		t.Fatalf("only %d of 10000 random inputs served: the generator does not exercise serving", serving)
	}
}

func describeLeases(ls []*coordinationv1.Lease) string {
	out := ""
	for _, l := range ls {
		if l == nil {
			out += "\n  nil"
			continue
		}
		out += fmt.Sprintf("\n  driver %q fence %q renew %v duration %v", l.Annotations[names.HeartbeatDriverAnnotation],
			l.Annotations[names.HeartbeatUnpublishFenceAnnotation], l.Spec.RenewTime, ptr.Deref(l.Spec.LeaseDurationSeconds, -1))
	}
	return out
}
