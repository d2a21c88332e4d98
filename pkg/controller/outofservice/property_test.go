package outofservice

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/names"
)

// pick returns one of the values.
func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

// randomNode draws node n1, nil one time in twenty: Ready, NotReady,
// Unknown or without a Ready condition, with the out-of-service taint under
// any effect, with or without timeAdded (at one of a few seconds, to the
// millisecond), a boot-ID record of this taint's second (mostly), of
// another second, in the older format without a time, or none, node-fencing's owner
// annotation, and a current boot ID boot-1, boot-2 or none.
func randomNode(r *rand.Rand) *v1.Node {
	if r.IntN(20) == 0 {
		return nil
	}
	t0 := testobj.Epoch
	added := t0.Add(time.Duration(r.IntN(3)) * time.Second).Add(time.Duration(r.IntN(1000)) * time.Millisecond)
	opts := []testobj.NodeOption{
		pick(r, testobj.ReadySince(t0), testobj.NotReadySince(t0), testobj.UnknownSince(t0), testobj.NoReadyCondition()),
		testobj.BootID(pick(r, "boot-1", "boot-2", "")),
	}
	switch r.IntN(5) {
	case 0:
	case 1:
		opts = append(opts, testobj.Taint(names.OutOfServiceTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule)))
	default:
		opts = append(opts, testobj.TaintAt(names.OutOfServiceTaint, pick(r, v1.TaintEffectNoExecute, v1.TaintEffectNoSchedule), added))
	}
	switch r.IntN(5) {
	case 0:
	case 1:
		opts = append(opts, testobj.Annotation(names.BootIDAnnotation, pick(r, "boot-1", "")))
	default:
		at := pick(r, added, added, t0.Add(time.Duration(r.IntN(3))*time.Second))
		opts = append(opts, testobj.Annotation(names.BootIDAnnotation, Record(pick(r, "boot-1", "boot-1", "boot-2", ""), at)))
	}
	if r.IntN(6) == 0 {
		opts = append(opts, testobj.Annotation(names.OutOfServiceOwnerAnnotation, pick(r, "uid-req-1", "")))
	}
	return testobj.Node("n1", opts...)
}

// describe prints what Decide reads of a node.
func describe(n *v1.Node) string {
	if n == nil {
		return "<gone>"
	}
	return fmt.Sprintf("{conditions %v taints %v annotations %v bootID %q}", n.Status.Conditions, n.Spec.Taints, n.Annotations, n.Status.NodeInfo.BootID)
}

// provenReboot restates the boot-ID proof from the node's raw fields: the
// record names the second of the current taint's timeAdded, and a boot ID
// that is known, as is the current one, and differs from it.
func provenReboot(n *v1.Node) bool {
	var taint *v1.Taint
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == names.OutOfServiceTaint {
			taint = &n.Spec.Taints[i]
			break
		}
	}
	raw, ok := n.Annotations[names.BootIDAnnotation]
	if taint == nil || taint.TimeAdded == nil || !ok {
		return false
	}
	i := strings.LastIndex(raw, "@")
	if i < 0 {
		return false
	}
	at, err := time.Parse(time.RFC3339, raw[i+1:])
	if err != nil || !at.Equal(taint.TimeAdded.Time.Truncate(time.Second)) {
		return false
	}
	recorded, current := raw[:i], n.Status.NodeInfo.BootID
	return recorded != "" && current != "" && recorded != current
}

// TestDecideProperties checks Decide over random nodes against the rules of
// the package doc and docs/controller.md:
//   - the taint is removed only from a Ready node that rebooted (a known
//     boot ID that differs from the one recorded for this very taint),
//     with no pod terminating and no VolumeAttachment left, and never when
//     node-fencing owns it (owner annotation);
//   - the boot ID is recorded only while the node is not Ready and the
//     taint is there, not owned by node-fencing, and not yet recorded for
//     this taint;
//   - the record is forgotten only with the taint or once it is gone;
//   - a missing node gets nothing; every decision says why.
func TestDecideProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2026))
	count := map[string]int{}
	for i := range 20000 {
		node := randomNode(r)
		terminating, vas := max(0, r.IntN(4)-2), max(0, r.IntN(4)-2)
		got := Decide(node, terminating, vas)
		fail := func(why string) {
			t.Fatalf("case %d: %s\nnode %s terminating %d VAs %d\ngot %+v", i, why, describe(node), terminating, vas, got)
		}
		if got.Why == "" {
			fail("a decision without a reason")
		}
		if node == nil {
			if got.Untaint || got.RecordBootID || got.ClearRecord {
				fail("acted on a missing node")
			}
			continue
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
		}
		_, tainted := tainted(node)
		owned := node.Annotations[names.OutOfServiceOwnerAnnotation] != ""
		_, recorded := EpisodeBootID(node)
		if got.Untaint {
			count["untaint"]++
			if !tainted || owned || !ready || !provenReboot(node) || terminating > 0 || vas > 0 {
				fail("untainted without a proven reboot of a Ready, clean node, or a taint node-fencing owns")
			}
		} else if tainted && !owned && ready && provenReboot(node) && terminating == 0 && vas == 0 {
			fail("a Ready node that rebooted and is clean keeps its taint")
		}
		if got.RecordBootID {
			count["record"]++
			if !tainted || owned || ready || recorded {
				fail("boot ID recorded for a Ready node, without the taint, under node-fencing's taint, or over this taint's record")
			}
		} else if tainted && !owned && !ready && !recorded {
			fail("the taint seen while the node is down without recording its boot ID")
		}
		if got.ClearRecord && tainted && !got.Untaint {
			fail("the record forgotten while the taint stays")
		}
		if got.RecordBootID && (got.Untaint || got.ClearRecord) {
			fail("a record written and removed or untainted at once")
		}
	}
	if count["untaint"] < 100 || count["record"] < 100 {
		t.Fatalf("untaints and records drawn too rarely: %v", count)
	}
}

// tainted returns the node's out-of-service taint (any effect).
func tainted(n *v1.Node) (*v1.Taint, bool) {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == names.OutOfServiceTaint {
			return &n.Spec.Taints[i], true
		}
	}
	return nil, false
}

// TestRecordRoundTripProperties checks the boot-ID record of one
// out-of-service episode: the record written for a taint (Record of the
// taint's timeAdded) reads back (EpisodeBootID) as the boot ID written,
// whatever the taint's sub-second part; it never reads back as another
// boot ID; it does not count for a taint added at another second, nor for
// a taint without timeAdded.
func TestRecordRoundTripProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 2026))
	alphabet := []rune("0123456789abcdef-@:Z é")
	for i := range 10000 {
		id := make([]rune, r.IntN(40))
		for j := range id {
			id[j] = alphabet[r.IntN(len(alphabet))]
		}
		boot := string(id)
		added := testobj.Epoch.Add(time.Duration(r.Int64N(1e15)))
		node := testobj.Node("n1", testobj.NotReadySince(testobj.Epoch), testobj.BootID(boot),
			testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, added))
		node.Annotations = map[string]string{names.BootIDAnnotation: Record(boot, node.Spec.Taints[0].TimeAdded.Time)}
		got, ok := EpisodeBootID(node)
		switch {
		case ok && got != boot:
			t.Fatalf("case %d: boot ID %q recorded at %s read back as %q", i, boot, added, got)
		case !ok && !strings.Contains(boot, "@"):
			t.Fatalf("case %d: boot ID %q recorded at %s does not read back", i, boot, added)
		}
		// Decide writes the record for the node as it is; it must then be
		// satisfied with it.
		if ok && Decide(node, 0, 0).RecordBootID {
			t.Fatalf("case %d: the record of this taint asked for again: %s", i, describe(node))
		}

		other := node.DeepCopy()
		shifted := added.Truncate(time.Second).Add(time.Duration(1+r.IntN(3600)) * time.Second * time.Duration(pick(r, 1, -1)))
		other.Spec.Taints = nil
		testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, shifted)(other)
		if got, ok := EpisodeBootID(other); ok {
			t.Fatalf("case %d: a record of the taint added at %s counts for one added at %s (read %q)", i, added, shifted, got)
		}
		other.Spec.Taints[0].TimeAdded = nil
		if got, ok := EpisodeBootID(other); ok {
			t.Fatalf("case %d: a record counts for a taint without timeAdded (read %q)", i, got)
		}
	}
}
