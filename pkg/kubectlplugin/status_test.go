package kubectlplugin

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/internal/testobj"
	"fenceline.io/fenceline/pkg/cutoff"
	"fenceline.io/fenceline/pkg/names"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func readWorld(t *testing.T) *Snapshot {
	t.Helper()
	c, _, _ := fakeClients(world())
	s, err := ReadSnapshot(context.Background(), c, now)
	if err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	return s
}

func TestBuildStatus(t *testing.T) {
	st := BuildStatus(readWorld(t), 20)

	drivers := map[string]DriverStatus{}
	for _, d := range st.Drivers {
		drivers[d.Name] = d
	}
	for _, tc := range []struct {
		driver              string
		safeDetach, serving bool
		unpublishFence      string
		missingContains     string
	}{
		{driver: driver, safeDetach: true, serving: true, unpublishFence: "true"},
		{driver: "nfs.example.com", missingContains: "no fenceline-attacher heartbeat Lease"},
	} {
		d := drivers[tc.driver]
		if d.SafeDetach != tc.safeDetach || d.Serving != tc.serving || d.UnpublishFence != tc.unpublishFence || !strings.Contains(d.Missing, tc.missingContains) {
			t.Errorf("driver %s = %+v, want safeDetach %v, serving %v, unpublishFence %q, missing containing %q", tc.driver, d, tc.safeDetach, tc.serving, tc.unpublishFence, tc.missingContains)
		}
	}

	if len(st.Nodes) != 1 || st.Nodes[0].Name != "dead" || st.Nodes[0].CutOff != "out-of-service" {
		t.Fatalf("nodes = %+v, want only node dead, cut off out-of-service (the healthy node has no mark)", st.Nodes)
	}
	var marks []string
	for _, m := range st.Nodes[0].Marks {
		marks = append(marks, m.Name)
		if m.Since == nil {
			t.Errorf("mark %s has no time", m.Name)
		}
	}
	want := []string{names.OutOfServiceTaint + ":NoExecute", names.FencingRequiredTaint + ":NoSchedule", names.FencingCompleteCondition + "=True"}
	if strings.Join(marks, ",") != strings.Join(want, ",") {
		t.Errorf("marks = %v, want %v", marks, want)
	}
	if len(st.Detaches) != 1 || st.Detaches[0].Name != "va-1" || st.Detaches[0].Mode != "fenced" {
		t.Errorf("pending detaches = %+v, want va-1 only (va-2 is not being detached), mode fenced", st.Detaches)
	}
	if len(st.FencingRequests) != 1 || st.FencingRequests[0].Phase != "Fenced" {
		t.Errorf("requests = %+v, want dead-abcde Fenced", st.FencingRequests)
	}
	if len(st.Events) != 1 || st.Events[0].Reason != "NodeFenced" {
		t.Errorf("events = %+v, want the controller's NodeFenced only (the kubelet's is not Fenceline's)", st.Events)
	}
}

func TestBuildStatusEventLimit(t *testing.T) {
	for _, tc := range []struct {
		max, want int
	}{{max: 0, want: 0}, {max: 1, want: 1}, {max: 5, want: 1}} {
		if got := len(BuildStatus(readWorld(t), tc.max).Events); got != tc.want {
			t.Errorf("--events=%d kept %d Events, want %d", tc.max, got, tc.want)
		}
	}
}

func TestPrintStatusGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		wide   bool
	}{{"status.golden", false}, {"status-wide.golden", true}} {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			p := &Printer{Out: &out, Now: now, Wide: tc.wide}
			if err := p.PrintStatus(BuildStatus(readWorld(t), 20)); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, out.Bytes())
		})
	}
}

func TestStatusWithoutFencingAPI(t *testing.T) {
	kube, _ := world()
	c, _, f := fakeClients(kube, nil)
	f.PrependReactor("list", "fencingrequests", notFound)
	s, err := ReadSnapshot(context.Background(), c, now)
	if err != nil {
		t.Fatalf("ReadSnapshot without the CRDs: %v", err)
	}
	var out bytes.Buffer
	if err := (&Printer{Out: &out, Now: now}).PrintStatus(BuildStatus(s, 20)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "the fencing API (fenceline.io FencingRequests) is not installed") {
		t.Errorf("status without the CRDs does not say so:\n%s", out.String())
	}
}

// A user who may not list StorageFences (the operators' role of the docs)
// still gets the status, with a note where they would be; an older
// fencing API without the StorageFence kind shows none.
func TestStatusStorageFencesNotReadable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reactor k8stesting.ReactionFunc
		want    string
	}{
		{"forbidden", forbidden, "not allowed to list storagefences.fenceline.io"},
		{"no such kind", notFound, "the StorageFence API is not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, fenceObjs := world()
			c, _, f := fakeClients(kube, fenceObjs)
			f.PrependReactor("list", "storagefences", tc.reactor)
			s, err := ReadSnapshot(context.Background(), c, now)
			if err != nil {
				t.Fatalf("ReadSnapshot: %v", err)
			}
			st := BuildStatus(s, 20)
			if len(st.FencingRequests) == 0 || len(st.StorageFences) != 0 {
				t.Fatalf("requests %d, storage fences %d: want the rest of the status and no storage fence", len(st.FencingRequests), len(st.StorageFences))
			}
			var out bytes.Buffer
			if err := (&Printer{Out: &out, Now: now}).PrintStatus(st); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "STORAGE FENCES\n  "+tc.want) {
				t.Errorf("status does not say %q under STORAGE FENCES:\n%s", tc.want, out.String())
			}
		})
	}
}

// A pending detach shows every reason it will be fenced: the attacher's
// record and a controller's intent, each with its writer; an unreadable
// one still reads as a fence.
func TestDetachStatusRecordAndIntent(t *testing.T) {
	deleting := func(annotations map[string]string) *storagev1.VolumeAttachment {
		va := testobj.VA("va", driver, "pv", "dead")
		del := metav1.NewTime(t0)
		va.DeletionTimestamp = &del
		va.Annotations = annotations
		return va
	}
	intent := cutoff.NewRecord(cutoff.ReasonSafeDetach, "", cutoff.ByControllerPrefix+"quarantine", t0).Encode()
	record := cutoff.NewRecord(cutoff.ReasonOutOfService, "csi-dead", cutoff.ByAttacher, t0).Encode()
	for _, tc := range []struct {
		name       string
		va         *storagev1.VolumeAttachment
		wantMode   string
		wantDetail []string
	}{
		{"nothing recorded", deleting(nil), "plain", nil},
		{"intent only", deleting(map[string]string{names.FenceIntentAnnotation: intent}), "fenced",
			[]string{"fence intent 2026", "by fenceline-controller/quarantine", "(safe-detach, CSI node not known to the writer)"}},
		{"record and intent", deleting(map[string]string{names.FenceRecordAnnotation: record, names.FenceIntentAnnotation: intent}), "fenced",
			[]string{"fence recorded", "by fenceline-attacher (out-of-service, CSI node csi-dead)", "; fence intent"}},
		{"unreadable intent", deleting(map[string]string{names.FenceIntentAnnotation: "{"}), "fenced",
			[]string{names.FenceIntentAnnotation, "is not a fence record"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := detachStatus(tc.va)
			if !ok || d.Mode != tc.wantMode {
				t.Fatalf("detachStatus = %+v, %v; want mode %s", d, ok, tc.wantMode)
			}
			for _, w := range tc.wantDetail {
				if !strings.Contains(d.Detail, w) {
					t.Errorf("detail %q lacks %q", d.Detail, w)
				}
			}
		})
	}
}

// An unfence ask shows until node-fencing carried it out: on a request
// that is not finished, or on the Node (its request is gone).
func TestPendingAsks(t *testing.T) {
	asked := map[string]string{names.UnfenceAnnotation: "user:alice", names.UnfenceVerifiedAnnotation: "rebooted"}
	for _, tc := range []struct {
		phase fencingv1alpha1.FencingPhase
		want  string
	}{
		{fencingv1alpha1.FencingPhaseFenced, "unfence asked by user:alice (verified: rebooted)"},
		{fencingv1alpha1.FencingPhasePending, "unfence asked by user:alice (verified: rebooted)"},
		{fencingv1alpha1.FencingPhaseRecovered, ""},
		{fencingv1alpha1.FencingPhaseCancelled, ""},
	} {
		r := fencingRequest("dead", tc.phase)
		r.Annotations = asked
		if got := requestStatus(r).Ask; got != tc.want {
			t.Errorf("request in %s: ask = %q, want %q", tc.phase, got, tc.want)
		}
	}
	n := testobj.Node("orphan", testobj.ReadySince(t0), testobj.Annotation(names.UnfenceAnnotation, "user:bob"))
	marks := nodeMarks(n)
	if len(marks) != 1 || marks[0].Kind != "ask" || marks[0].Detail != "unfence asked by user:bob" {
		t.Errorf("marks of a Node with an ask = %+v, want the ask alone", marks)
	}
}

// Who applied an out-of-service taint: Fenceline (its owner annotation),
// another fencer (its applied-by annotation), or someone else.
func TestOutOfServiceMarkSaysWhoApplied(t *testing.T) {
	taint := testobj.TaintAt(names.OutOfServiceTaint, v1.TaintEffectNoExecute, t0)
	for _, tc := range []struct {
		opt  testobj.NodeOption
		want string
	}{
		{testobj.Annotation(names.OutOfServiceOwnerAnnotation, "uid-1"), "added by Fenceline for FencingRequest UID uid-1"},
		{testobj.Annotation(names.OutOfServiceAppliedByAnnotation, "pacemaker"), "applied by pacemaker"},
		{testobj.Annotation("other", "x"), "not added by Fenceline"},
	} {
		marks := nodeMarks(testobj.Node("n", taint, tc.opt))
		if len(marks) == 0 || !strings.HasPrefix(marks[0].Detail, tc.want) {
			t.Errorf("marks = %+v, want the taint's detail to start with %q", marks, tc.want)
		}
	}
}

// A paused policy says so in the coverage table and in -o json.
func TestPrintCoveragePaused(t *testing.T) {
	st := Status{FencingAPI: true, Coverage: []CoverageStatus{{Policy: "workers", Paused: true, Known: true, Selected: 3}}}
	var out strings.Builder
	if err := (&Printer{Out: &out}).PrintStatus(st); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`workers \(paused: no automatic fence\) +3/3`).MatchString(out.String()) {
		t.Errorf("coverage table lacks the paused policy:\n%s", out.String())
	}
}
