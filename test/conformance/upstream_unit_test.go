package conformance

import (
	"reflect"
	"regexp"
	"testing"
	"time"
)

// A Ginkgo JSON report as the upstream binary writes it, cut down: a
// suite-level node, two focused specs and one the focus left out.
const sampleReport = `[{
  "SuiteDescription": "Kubernetes e2e suite (node)",
  "SpecReports": [
    {"LeafNodeType": "ReportAfterSuite", "LeafNodeText": "Kubernetes e2e JUnit report", "State": "passed"},
    {"ContainerHierarchyTexts": ["[sig-node] NoExecuteTaintManager Single Pod [Serial]"], "LeafNodeType": "It",
     "LeafNodeText": "evicts pods from tainted nodes", "State": "passed", "RunTime": 1500000000},
    {"ContainerHierarchyTexts": ["[sig-node] NoExecuteTaintManager Multiple Pods [Serial]"], "LeafNodeType": "It",
     "LeafNodeText": "evicts pods with minTolerationSeconds", "State": "failed", "RunTime": 2000000000,
     "Failure": {"Message": "Failed to evict all Pods. 1 pod(s) is not evicted."}},
    {"ContainerHierarchyTexts": ["[sig-node] Pods Extended", "Pod Container Status"], "LeafNodeType": "It",
     "LeafNodeText": "should never report success for a pending container", "State": "skipped"}
  ]
}]`

func TestParseGinkgoReport(t *testing.T) {
	specs, err := parseGinkgoReport([]byte(sampleReport), regexp.MustCompile(taintManagerFocus))
	if err != nil {
		t.Fatal(err)
	}
	want := []spec{
		{Name: "[sig-node] NoExecuteTaintManager Single Pod [Serial] evicts pods from tainted nodes", State: "passed", RunTime: 1500 * time.Millisecond},
		{Name: "[sig-node] NoExecuteTaintManager Multiple Pods [Serial] evicts pods with minTolerationSeconds", State: "failed", RunTime: 2 * time.Second,
			Failure: "Failed to evict all Pods. 1 pod(s) is not evicted."},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Fatalf("parseGinkgoReport:\n got %+v\nwant %+v", specs, want)
	}
	res := suiteResult{Specs: specs}
	if got := res.byState("passed"); len(got) != 1 || got[0] != want[0].Name {
		t.Errorf("passed = %q", got)
	}
	if got := res.notPassedOrSkipped(); len(got) != 1 || got[0].Name != want[1].Name {
		t.Errorf("notPassedOrSkipped = %+v", got)
	}
	if _, err := parseGinkgoReport([]byte(`{"not": "a list"}`), regexp.MustCompile(".")); err == nil {
		t.Error("a report that is not a list was accepted")
	}
}

func TestSelectedImplementations(t *testing.T) {
	both := map[string]bool{KubeControllerManager: true, Fenceline: true}
	for _, tc := range []struct {
		in   string
		want map[string]bool
	}{
		{"", both},
		{"all", both},
		{"fenceline", map[string]bool{Fenceline: true}},
		{"kube-controller-manager", map[string]bool{KubeControllerManager: true}},
		{" fenceline , kube-controller-manager ", both},
	} {
		got, err := selectedImplementations(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("selectedImplementations(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if _, err := selectedImplementations("kcm"); err == nil {
		t.Error("an unknown implementation was accepted")
	}
}
