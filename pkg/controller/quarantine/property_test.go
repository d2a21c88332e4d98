package quarantine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/controller/podvolumes"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// The properties' delays, and the instant around which their times are
// drawn.
const (
	propDelay     = 40 * time.Second
	propLiftDelay = 10 * time.Second
)

var propNow = testobj.Epoch.Add(time.Hour)

// The drivers of the random volumes: two opted into safe detach, one not.
const (
	safeA = "safe.example"
	safeB = "safe-b.example"
	plain = "other.example"
)

func isSafe(d string) bool { return d == safeA || d == safeB }

// pick returns one of the values.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// randomNode draws node n1, nil one time in twenty: Ready, NotReady,
// Unknown or without a Ready condition since up to two minutes ago, with
// the quarantine key under any effect or not at all, and volumes in use of
// the safe and the plain drivers and an in-tree one.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(20) == 0 {
		return nil
	}
	since := propNow.Add(-time.Duration(r.IntN(120000)) * time.Millisecond)
	opts := []testobj.NodeOption{pick(r, testobj.ReadySince(since), testobj.NotReadySince(since), testobj.UnknownSince(since), testobj.NoReadyCondition())}
	switch r.IntN(4) {
	case 0:
	case 1:
		opts = append(opts, testobj.TaintAt(names.QuarantineTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectPreferNoSchedule), since))
	default:
		opts = append(opts, testobj.TaintAt(names.QuarantineTaint, v1.TaintEffectNoSchedule, since))
	}
	var inUse []v1.UniqueVolumeName
	for _, v := range allVolumeNames {
		if r.IntN(2) == 0 {
			inUse = append(inUse, v)
		}
	}
	return testobj.Node("n1", append(opts, testobj.VolumesInUse(inUse...))...)
}

// allVolumeNames are the volumesInUse entries randomNode draws from.
var allVolumeNames = []v1.UniqueVolumeName{
	nodeutil.CSIUniqueVolumeName(safeA, "a1"), nodeutil.CSIUniqueVolumeName(safeA, "a2"),
	nodeutil.CSIUniqueVolumeName(safeB, "b1"), nodeutil.CSIUniqueVolumeName(plain, "c1"),
	"kubernetes.io/iscsi/x",
}

// randomAttachers draws the attacher evidence: per driver, serving,
// refused with what is missing, refused without saying, or not looked up.
func randomAttachers(r *rand.Rand) Attachers {
	a := Attachers{}
	for _, d := range []string{safeA, safeB, plain} {
		switch r.IntN(5) {
		case 0:
		case 1:
			a[d] = cutoff.Evidence{Missing: "no heartbeat"}
		case 2:
			a[d] = cutoff.Evidence{}
		default:
			a[d] = cutoff.Evidence{Serving: true}
		}
	}
	return a
}

// randomVolumes draws a pod's classified volumes: safe-detach CSI volumes
// (sometimes ReadWriteMany, sometimes of the second safe driver), harmless
// ones, and one time in three a volume of another kind or driver.
func randomVolumes(r *rand.Rand) []podvolumes.Volume {
	var vols []podvolumes.Volume
	for j := range r.IntN(4) {
		v := safeVol(fmt.Sprintf("v%d", j))
		switch r.IntN(8) {
		case 0:
			v.RWX = true
		case 1, 2:
			v.Driver = safeB
		case 3:
			v = podvolumes.Volume{Name: v.Name, Kind: podvolumes.KindHarmless}
		}
		vols = append(vols, v)
	}
	if r.IntN(3) == 0 {
		odd := pick(r,
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindCSI, Driver: plain},
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindInlineCSI, Driver: safeA},
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindNodeLocal, Detail: "hostPath"},
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindOther, Detail: "nfs"},
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindUnresolved, Detail: "PVC ns/x is not bound"},
			podvolumes.Volume{Name: "x", Kind: podvolumes.KindHarmless})
		vols = slices.Insert(vols, r.IntN(len(vols)+1), odd)
	}
	return vols
}

// randomPod draws a pod bound to n1 (or n2), nil one time in twenty,
// running, terminating or already force-deleted.
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
	return testobj.Pod("ns", "p", opts...)
}

// describe prints what the decisions read of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{conditions %v taints %v volumesInUse %v}", n.Status.Conditions, n.Spec.Taints, n.Status.VolumesInUse)
}

// notReadyFor restates how long the node's Ready condition has not been
// True at now (false when it is True): from its lastTransitionTime, or the
// node's creation when it has none.
func notReadyFor(n *v1.Node, now time.Time) (time.Duration, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status == v1.ConditionTrue {
				return 0, false
			}
			return now.Sub(c.LastTransitionTime.Time), true
		}
	}
	return now.Sub(n.CreationTimestamp.Time), true
}

// quarantined restates "the node carries fenceline.io/quarantine:NoSchedule".
func quarantined(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == names.QuarantineTaint && t.Effect == v1.TaintEffectNoSchedule
	})
}

// volumesSafe restates the volume rule of DecidePod: every volume is
// harmless or a CSI volume of a safe-detach driver that is not
// ReadWriteMany and whose driver is served, and at least one is the
// latter.
func volumesSafe(vols []podvolumes.Volume, a Attachers) bool {
	safe := 0
	for _, v := range vols {
		switch {
		case v.Kind == podvolumes.KindHarmless:
		case v.Kind == podvolumes.KindCSI && v.SafeDetach && !v.RWX && a[v.Driver].Serving:
			safe++
		default:
			return false
		}
	}
	return safe > 0
}

// TestDecidePodProperties checks DecidePod over random nodes, pods,
// volumes and attacher evidence against its rule and docs/controller.md:
//   - a pod is deleted only when the node exists, has not been Ready for
//     the delay, carries the quarantine taint (NoSchedule), the pod is
//     bound to it, terminating and not yet force-deleted, and every volume
//     is harmless or a non-RWX volume of a safe-detach driver for which a
//     fence-capable attacher is seen serving, at least one of them the
//     latter; then it always is;
//   - the node is tainted for a pod only when that pod would then be
//     deleted (never for a pod that will be refused);
//   - a wait ends exactly after After, within the delay;
//   - a deletion decided at now still holds at any later now;
//   - the order of the volumes changes nothing; every decision says why.
func TestDecidePodProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 2026))
	count := map[Action]int{}
	for i := range 20000 {
		node, pod, vols, att := randomNode(r), randomPod(r), randomVolumes(r), randomAttachers(r)
		now := propNow
		got := DecidePod(node, pod, vols, att, now, propDelay)
		count[got.Action]++
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s\npod %+v\nvolumes %+v\nattachers %+v\ngot %+v", i, why, describe(node), pod, vols, att, got)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		qualifies := false // by node and pod
		if node != nil && pod != nil && pod.Spec.NodeName == node.Name {
			down, notReady := notReadyFor(node, now)
			terminating := pod.DeletionTimestamp != nil
			forceDeleted := terminating && *pod.DeletionGracePeriodSeconds == 0
			qualifies = notReady && down >= propDelay && terminating && !forceDeleted
		}
		safe := volumesSafe(vols, att)
		switch {
		case qualifies && safe && quarantined(node):
			if got.Action != Delete {
				fail("want Delete")
			}
		case qualifies && safe:
			if got.Action != TaintFirst {
				fail("want TaintFirst")
			}
		case got.Action == Delete || got.Action == TaintFirst:
			fail("deleted (or tainted for) a pod that does not qualify")
		}
		switch got.Action {
		case Wait:
			if got.After <= 0 || got.After > propDelay {
				fail("a wait outside (0, delay]")
			}
			if again := DecidePod(node, pod, vols, att, now.Add(got.After), propDelay); again.Action == Wait {
				fail(fmt.Sprintf("still waiting after After: %+v", again))
			}
		case Delete:
			later := now.Add(time.Duration(r.IntN(3600)) * time.Second)
			if again := DecidePod(node, pod, vols, att, later, propDelay); again.Action != Delete {
				fail(fmt.Sprintf("not deleted at the later %s: %+v", later, again))
			}
		}
		shuffled := slices.Clone(vols)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if again := DecidePod(node, pod, shuffled, att, now, propDelay); again.Action != got.Action {
			fail(fmt.Sprintf("the order of the volumes changed the action: %+v", again))
		}
	}
	for _, a := range []Action{Skip, Wait, Refuse, TaintFirst, Delete} {
		if count[a] < 200 {
			t.Fatalf("action %d drawn only %d times: the generator does not exercise it (%v)", a, count[a], count)
		}
	}
}

// TestDecideUntaintProperties checks DecideUntaint over random nodes and
// counts against its rule: the quarantine is lifted exactly when the node
// exists, carries the taint with effect NoSchedule, has been Ready for the
// lift delay, no VolumeAttachment of a released volume remains and the
// kubelet lists no fenced volume any more; a wait ends after After; a lift
// decided at now holds at any later now.
func TestDecideUntaintProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(62, 2026))
	lifted := 0
	for i := range 10000 {
		node := randomNode(r)
		released, stale := max(0, r.IntN(4)-2), max(0, r.IntN(4)-2)
		now := propNow.Add(-time.Duration(r.IntN(110)) * time.Second)
		got := DecideUntaint(node, released, stale, now, propLiftDelay)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s released VAs %d stale volumes %d now %s\ngot %+v", i, why, describe(node), released, stale, now, got)
		}
		want := false
		if node != nil {
			_, notReady := notReadyFor(node, now)
			up := time.Duration(0)
			if c := nodeutil.ReadyCondition(node); c != nil {
				up = now.Sub(c.LastTransitionTime.Time)
			}
			want = quarantined(node) && !notReady && up >= propLiftDelay && released == 0 && stale == 0
		}
		if got.Untaint != want || got.Why == "" {
			fail(fmt.Sprintf("want Untaint=%v with a reason", want))
		}
		if got.After > 0 {
			if got.Untaint {
				fail("a wait that lifts")
			}
			if again := DecideUntaint(node, released, stale, now.Add(got.After), propLiftDelay); again.After > 0 {
				fail(fmt.Sprintf("still waiting after After: %+v", again))
			}
		}
		if got.Untaint {
			lifted++
			if !DecideUntaint(node, released, stale, now.Add(time.Duration(r.IntN(3600))*time.Second), propLiftDelay).Untaint {
				fail("the lift no longer decided at a later now")
			}
		}
	}
	if lifted < 200 {
		t.Fatalf("only %d of 10000 lifts: the generator does not exercise it", lifted)
	}
}

// TestReleasedVAsProperties checks ReleasedVAs over random
// VolumeAttachments: it counts exactly those of safe-detach drivers whose
// PersistentVolume no live pod on the node uses, those without a PV name
// included (they cannot be matched to a pod); a pod that stops using a
// volume never lowers the count, and nor does another VolumeAttachment.
func TestReleasedVAsProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 2026))
	pvs := []string{"pv-a", "pv-b", "pv-c", "pv-d"}
	for i := range 5000 {
		var vas []*storagev1.VolumeAttachment
		for j := range r.IntN(6) {
			va := testobj.VA(fmt.Sprintf("va-%d", j), pick(r, safeA, safeB, plain), pick(r, pvs...), "n1")
			if r.IntN(6) == 0 {
				va.Spec.Source.PersistentVolumeName = nil
			}
			vas = append(vas, va)
		}
		live := map[string]bool{}
		for _, pv := range pvs {
			if r.IntN(3) == 0 {
				live[pv] = true
			}
		}
		got := ReleasedVAs(vas, isSafe, live)
		want := 0
		for _, va := range vas {
			if pv := va.Spec.Source.PersistentVolumeName; isSafe(va.Spec.Attacher) && (pv == nil || !live[*pv]) {
				want++
			}
		}
		if got != want {
			t.Fatalf("case %d: ReleasedVAs() = %d, want %d (live %v)", i, got, want, live)
		}
		fewer := map[string]bool{}
		for pv := range live {
			if r.IntN(2) == 0 {
				fewer[pv] = true
			}
		}
		if n := ReleasedVAs(vas, isSafe, fewer); n < got {
			t.Fatalf("case %d: fewer live volumes (%v, was %v) lowered the count from %d to %d", i, fewer, live, got, n)
		}
		if n := ReleasedVAs(append(slices.Clone(vas), testobj.VA("va-x", pick(r, safeA, plain), pick(r, pvs...), "n1")), isSafe, live); n < got {
			t.Fatalf("case %d: another VolumeAttachment lowered the count from %d to %d", i, got, n)
		}
	}
}

// TestVolumesToReleaseProperties checks VolumesToRelease and
// UnusedSafeVolumes over random nodes, live volumes, keep reasons and
// attacher evidence against their rule and docs/controller.md:
//   - UnusedSafeVolumes is exactly the volumesInUse entries of safe-detach
//     drivers that no live pod uses, in their order;
//   - nothing is released from a node that is gone, Ready, not
//     quarantined (NoSchedule) or not yet NotReady for the delay;
//   - a released volume is one of those unused entries, its driver is
//     served by a fence-capable attacher and nothing keeps it listed
//     (ReadWriteMany, or no PersistentVolume found);
//   - every unused entry that is not released is withheld with a reason;
//   - a release decided at now still holds at any later now.
func TestVolumesToReleaseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(64, 2026))
	released := 0
	for i := range 10000 {
		node, att := randomNode(r), randomAttachers(r)
		inUse := map[v1.UniqueVolumeName]bool{}
		kept := map[v1.UniqueVolumeName]bool{}
		for _, v := range allVolumeNames {
			inUse[v] = r.IntN(4) == 0
			kept[v] = r.IntN(5) == 0
		}
		keep := func(v v1.UniqueVolumeName) string {
			if kept[v] {
				return fmt.Sprintf("volume %s is ReadWriteMany", v)
			}
			return ""
		}
		now := propNow.Add(-time.Duration(r.IntN(90)) * time.Second)
		got := VolumesToRelease(node, isSafe, att, keep, inUse, now, propDelay)
		unused := UnusedSafeVolumes(node, isSafe, inUse)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s now %s\nin use %v kept %v attachers %+v\nunused %v\ngot %+v", i, why, describe(node), now, inUse, kept, att, unused, got)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		var want []v1.UniqueVolumeName
		if node != nil {
			for _, v := range node.Status.VolumesInUse {
				if d, ok := nodeutil.CSIVolumeDriver(v); ok && isSafe(d) && !inUse[v] {
					want = append(want, v)
				}
			}
		}
		if !slices.Equal(unused, want) {
			fail(fmt.Sprintf("UnusedSafeVolumes, want %v", want))
		}
		if len(got.Volumes) == 0 {
			continue
		}
		released++
		down, notReady := notReadyFor(node, now)
		if !notReady || !quarantined(node) || down < propDelay {
			fail("released from a node that is Ready, not quarantined, or NotReady for less than the delay")
		}
		withheld := 0
		for _, v := range unused {
			d, _ := nodeutil.CSIVolumeDriver(v)
			switch {
			case !slices.Contains(got.Volumes, v):
				withheld++
			case kept[v] || !att[d].Serving:
				fail(fmt.Sprintf("released %s, which is kept listed or whose driver is not served", v))
			}
		}
		for _, v := range got.Volumes {
			if !slices.Contains(unused, v) {
				fail(fmt.Sprintf("released %s, which a live pod uses or which is no safe-detach volume", v))
			}
		}
		if withheld > 0 && got.Withheld == "" {
			fail("unused volumes kept without a reason")
		}
		later := now.Add(time.Duration(r.IntN(3600)) * time.Second)
		if again := VolumesToRelease(node, isSafe, att, keep, inUse, later, propDelay); !slices.Equal(again.Volumes, got.Volumes) {
			fail(fmt.Sprintf("the release changed at the later %s: %+v", later, again))
		}
	}
	if released < 500 {
		t.Fatalf("only %d of 10000 releases: the generator does not exercise it", released)
	}
}
