package kubectlplugin

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/kube/nodeutil"
	"fenceline.io/fenceline/pkg/names"
)

// explainWorld runs Explain for node on the objects; with fenceObjs nil,
// the API server does not serve the fencing API.
func explainWorld(t *testing.T, kube, fenceObjs []runtime.Object, node string) Explanation {
	t.Helper()
	c, _, f := fakeClients(kube, fenceObjs)
	if fenceObjs == nil {
		f.PrependReactor("list", "fencingrequests", notFound)
	}
	s, err := ReadSnapshot(context.Background(), c, now)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ReadNodeObjects(context.Background(), c, node)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Explain(s, objs, node, DefaultExplainConfig())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func verdictOf(e Explanation, controller, object string) (Verdict, bool) {
	for _, v := range e.Verdicts {
		if v.Controller == controller && v.Object == object {
			return v, true
		}
	}
	return Verdict{}, false
}

func TestExplain(t *testing.T) {
	kube, fenceObjs := world()
	// A quarantined node whose only pod uses a volume of the safe-detach
	// driver, NotReady for longer than the quarantine delay.
	quarantined := testobj.Node("q", testobj.NotReadySince(now.Add(-time.Minute)), testobj.Taint(names.QuarantineTaint, v1.TaintEffectNoSchedule))
	qpod := testobj.Pod("db", "q-0", testobj.OnNode("q"), testobj.Terminating(now.Add(-30*time.Second)), testobj.Claim("data", "data-q-0"))
	qva := testobj.VA("va-q", driver, "pv-q", "q")
	kubeQ := append(append([]runtime.Object{}, kube...), quarantined, qpod, qva,
		testobj.PVC("db", "data-q-0", "pv-q"), testobj.CSIPV("pv-q", driver, "vol-q", v1.ReadWriteOnce))
	// A node back with a new boot ID under a policy that unfences by hand.
	back := fencedNode("back", testobj.ReadySince(now.Add(-time.Minute)), testobj.BootID("boot-2"))
	kubeBack := append(append([]runtime.Object{}, kube...), back)
	fenceBack := []runtime.Object{testobj.FencePolicy("workers", testobj.ManualUnfence()), testobj.FenceClass("bmc"), fencingRequest("back", fencingv1alpha1.FencingPhaseRecovering)}

	// A running stateful pod on the fenced node, and two on a node that is
	// unreachable but not known cut off: one of the safe-detach driver,
	// one of a driver that did not opt in.
	unreachable := testobj.Node("unreachable", testobj.UnknownSince(now.Add(-10*time.Minute)), testobj.TaintAt(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, now.Add(-10*time.Minute)))
	kubeTE := append(append([]runtime.Object{}, kube...), unreachable,
		testobj.Pod("db", "run-0", testobj.OnNode("dead"), testobj.Claim("data", "data-web-0")),
		testobj.Pod("db", "run-1", testobj.OnNode("unreachable"), testobj.Claim("data", "data-web-0")),
		testobj.PVC("db", "data-nfs-0", "pv-n"), testobj.CSIPV("pv-n", "nfs.example.com", "vol-n", v1.ReadWriteOnce),
		testobj.Pod("db", "run-2", testobj.OnNode("unreachable"), testobj.Claim("data", "data-nfs-0")))

	// A Ready node whose attachment carries a controller's fence intent:
	// the attacher fences it whatever the node looks like.
	iva := testobj.VA("va-i", driver, "pv-i", "live")
	iva.Annotations = map[string]string{names.FenceIntentAnnotation: cutoff.NewRecord(cutoff.ReasonSafeDetach, "", cutoff.ByControllerPrefix+"quarantine", now).Encode()}
	kubeIntent := append(append([]runtime.Object{}, kube...), iva)
	// A Ready node that still uses the volume of an attachment being
	// deleted: that detach was forced, so it is fenced.
	inUse := testobj.Node("busy", testobj.ReadySince(now.Add(-time.Hour)), testobj.VolumesInUse(nodeutil.CSIUniqueVolumeName(driver, "vol-u")))
	uva := testobj.VA("va-u", driver, "pv-u", "busy")
	gone := metav1.NewTime(now.Add(-time.Second))
	uva.DeletionTimestamp = &gone
	kubeInUse := append(append([]runtime.Object{}, kube...), inUse, uva, testobj.CSIPV("pv-u", driver, "vol-u", v1.ReadWriteOnce))

	for _, tc := range []struct {
		name, node         string
		kube, fence        []runtime.Object
		controller, object string
		decision, why      string
	}{
		{name: "podgc deletes a terminating pod of a fenced, out-of-service node", node: "dead", kube: kube, fence: fenceObjs,
			controller: "podgc", object: "pod/db/web-0", decision: "force-delete", why: "out of service"},
		{name: "the attacher keeps a recorded fence", node: "dead", kube: kube, fence: fenceObjs,
			controller: "attacher", object: "volumeattachment/va-1", decision: "fenced detach", why: "out-of-service"},
		{name: "node-fencing waits for the fenced node to come back", node: "dead", kube: kube, fence: fenceObjs,
			controller: "node-fencing", object: "node/dead", decision: "wait (NodeNotReady)", why: "fenced and not Ready"},
		{name: "a healthy node is not a candidate", node: "live", kube: kube, fence: fenceObjs,
			controller: "node-fencing", object: "node/live", decision: "wait (NotCandidate)"},
		{name: "a healthy node's attachment would be detached plain", node: "live", kube: kube, fence: fenceObjs,
			controller: "attacher", object: "volumeattachment/va-2", decision: "if detached now: plain detach", why: "not cut off"},
		{name: "a controller's fence intent makes a Ready node's detach fenced", node: "live", kube: kubeIntent, fence: fenceObjs,
			controller: "attacher", object: "volumeattachment/va-i", decision: "if detached now: fenced detach", why: "safe-detach"},
		{name: "a detach of a volume the Ready node still uses is fenced", node: "busy", kube: kubeInUse, fence: fenceObjs,
			controller: "attacher", object: "volumeattachment/va-u", decision: "fenced detach", why: "in-use"},
		{name: "quarantine deletes a pod of a safe-detach driver served by a fencing attacher", node: "q", kube: kubeQ, fence: fenceObjs,
			controller: "quarantine", object: "pod/db/q-0", decision: "force-delete", why: "safe-detach driver"},
		{name: "a quarantined node's attachment is fenced", node: "q", kube: kubeQ, fence: fenceObjs,
			controller: "attacher", object: "volumeattachment/va-q", decision: "if detached now: fenced detach", why: "safe-detach"},
		{name: "force-eviction needs its taint", node: "q", kube: kubeQ, fence: fenceObjs,
			controller: "force-eviction", object: "pod/db/q-0", decision: "leave", why: "no force-eviction taint"},
		{name: "a manual-unfence policy waits for a human", node: "back", kube: kubeBack, fence: fenceBack,
			controller: "node-fencing", object: "node/back", decision: "wait (ManualUnfence)", why: "unfences by hand"},
		{name: "the out-of-service remover leaves node-fencing's taint", node: "back", kube: kubeBack, fence: fenceBack,
			controller: "out-of-service (opt-in)", object: "node/back", decision: "keep", why: "node-fencing added"},
		{name: "taint-eviction force-deletes a stateful pod of a node cut off", node: "dead", kube: kubeTE, fence: fenceObjs,
			controller: "taint-eviction (alpha)", object: "pod/db/run-0", decision: "force-delete", why: "cut off from the pod's storage (out-of-service)"},
		{name: "taint-eviction hands a safe-detach driver's stateful pod of a node not known cut off to quarantine", node: "unreachable", kube: kubeTE, fence: fenceObjs,
			controller: "taint-eviction (alpha)", object: "pod/db/run-1", decision: "evict", why: "hands the pod to quarantine"},
		{name: "taint-eviction holds another driver's stateful pod of a node not known cut off", node: "unreachable", kube: kubeTE, fence: fenceObjs,
			controller: "taint-eviction (alpha)", object: "pod/db/run-2", decision: "hold", why: "waits for the node to be fenced"},
		{name: "without the fencing API node-fencing does not run", node: "live", kube: kube, fence: nil,
			controller: "node-fencing", object: "node/live", decision: "none", why: "not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := explainWorld(t, tc.kube, tc.fence, tc.node)
			v, ok := verdictOf(e, tc.controller, tc.object)
			if !ok {
				t.Fatalf("no verdict of %s about %s in %+v", tc.controller, tc.object, e.Verdicts)
			}
			if v.Decision != tc.decision || !strings.Contains(v.Why, tc.why) {
				t.Errorf("%s about %s = %q (%s), want %q with a reason containing %q", tc.controller, tc.object, v.Decision, v.Why, tc.decision, tc.why)
			}
		})
	}
}

func TestExplainUnknownNode(t *testing.T) {
	s := readWorld(t)
	if _, err := Explain(s, &NodeObjects{}, "ghost", DefaultExplainConfig()); err == nil || !strings.Contains(err.Error(), `node "ghost" not found`) {
		t.Errorf("Explain(ghost) error = %v, want node not found", err)
	}
}

func TestPrintExplanationGolden(t *testing.T) {
	kube, fenceObjs := world()
	var out bytes.Buffer
	if err := (&Printer{Out: &out, Now: now}).PrintExplanation(explainWorld(t, kube, fenceObjs, "dead")); err != nil {
		t.Fatal(err)
	}
	golden(t, "explain-dead.golden", out.Bytes())
}
