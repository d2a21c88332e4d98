package monitoring

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"fenceline.io/fenceline/test/cluster"
)

// runbookBase is docs/runbooks.md in the repository; every alert's
// runbook_url is this plus the anchor of its section.
const runbookBase = "https://fenceline.io/fenceline/blob/main/docs/runbooks.md#"

func TestPromtoolCheckRules(t *testing.T) {
	dir, err := monitoringDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := promtool("check", "rules", "--lint=all", "--lint-fatal", filepath.Join(dir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
}

func TestPromtoolTestRules(t *testing.T) {
	dir, err := monitoringDir()
	if err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests in %s/tests (%v)", dir, err)
	}
	out, err := promtool(append([]string{"test", "rules"}, tests...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
}

// Every alert has a test that fires it: a rule test file names it with
// exp_alerts, so an alert nobody has seen fire cannot be merged.
func TestEveryAlertIsTested(t *testing.T) {
	alerts, err := readAlerts()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := monitoringDir()
	if err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join(dir, "tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type alertTest struct {
		EvalTime  string           `json:"eval_time"`
		Alertname string           `json:"alertname"`
		ExpAlerts []map[string]any `json:"exp_alerts"`
	}
	type ruleTestFile struct {
		RuleFiles          []string `json:"rule_files"`
		EvaluationInterval string   `json:"evaluation_interval"`
		Tests              []struct {
			Name          string           `json:"name"`
			Interval      string           `json:"interval"`
			InputSeries   []map[string]any `json:"input_series"`
			AlertRuleTest []alertTest      `json:"alert_rule_test"`
		} `json:"tests"`
	}
	fired, silent := map[string]bool{}, map[string]bool{}
	for _, p := range tests {
		var file ruleTestFile
		if err := readYAML(p, &file); err != nil {
			t.Fatal(err)
		}
		for _, tc := range file.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
		}
	}
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			if !fired[r.Alert] {
				t.Errorf("alert %s: no rule test expects it to fire", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s: no rule test expects it to stay silent on a near miss", r.Alert)
			}
		}
	}
}

// Every alert carries what an on-call engineer needs: a severity, a summary,
// a description, and a runbook_url that points at an existing section of
// docs/runbooks.md.
func TestAlertsHaveRunbooks(t *testing.T) {
	alerts, err := readAlerts()
	if err != nil {
		t.Fatal(err)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	runbooks, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(runbooks))
	n := 0
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name (recording rules belong elsewhere)", g.Name)
				continue
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
				continue
			}
			if anchor != anchorOf(r.Alert) {
				t.Errorf("%s: runbook_url anchor %q, want its own section %q", r.Alert, anchor, anchorOf(r.Alert))
			}
			if !anchors[anchor] {
				t.Errorf("%s: docs/runbooks.md has no section with anchor %q", r.Alert, anchor)
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
}

// headingAnchors returns the anchors a Markdown renderer gives the headings
// of doc (GitHub's rule: lower case, spaces to dashes, punctuation dropped).
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			out[anchorOf(strings.TrimSpace(strings.TrimLeft(h, "#")))] = true
		}
	}
	return out
}

var notAnchor = regexp.MustCompile(`[^a-z0-9 _-]`)

func anchorOf(heading string) string {
	return strings.ReplaceAll(notAnchor.ReplaceAllString(strings.ToLower(heading), ""), " ", "-")
}

func TestAnchorOf(t *testing.T) {
	for heading, want := range map[string]string{
		"FencelineDetachPending":          "fencelinedetachpending",
		"Installing the rules":            "installing-the-rules",
		"What `promtool` checks, and why": "what-promtool-checks-and-why",
	} {
		if got := anchorOf(heading); got != want {
			t.Errorf("anchorOf(%q) = %q, want %q", heading, got, want)
		}
	}
}

// prometheusrule.yaml and the Helm chart's files/alerts.yaml hold exactly the
// groups of alerts.yaml.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	dir, err := monitoringDir()
	if err != nil {
		t.Fatal(err)
	}
	var plain struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := readYAML(filepath.Join(dir, "alerts.yaml"), &plain); err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []map[string]any `json:"groups"`
		} `json:"spec"`
	}
	if err := readYAML(filepath.Join(dir, "prometheusrule.yaml"), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("prometheusrule.yaml is %s %s, want monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	if len(plain.Groups) == 0 {
		t.Fatal("alerts.yaml has no groups")
	}
	if !reflect.DeepEqual(plain.Groups, pr.Spec.Groups) {
		t.Errorf("prometheusrule.yaml's groups differ from alerts.yaml's: %s", groupDiff(plain.Groups, pr.Spec.Groups))
	}
	// The Helm chart's PrometheusRule takes its groups from its own copy.
	var chart struct {
		Groups []map[string]any `json:"groups"`
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := readYAML(filepath.Join(root, "deploy", "helm", "fenceline", "files", "alerts.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plain.Groups, chart.Groups) {
		t.Errorf("the Helm chart's files/alerts.yaml differs from alerts.yaml (copy it over): %s", groupDiff(plain.Groups, chart.Groups))
	}
}

// groupDiff names the first rule that differs, for a readable failure.
func groupDiff(a, b []map[string]any) string {
	names := func(gs []map[string]any) []string {
		var out []string
		for _, g := range gs {
			out = append(out, fmt.Sprint(g["name"]))
		}
		return out
	}
	if !slices.Equal(names(a), names(b)) {
		return fmt.Sprintf("groups %v vs %v", names(a), names(b))
	}
	for i := range a {
		ra, _ := a[i]["rules"].([]any)
		rb, _ := b[i]["rules"].([]any)
		for j := range min(len(ra), len(rb)) {
			if !reflect.DeepEqual(ra[j], rb[j]) {
				return fmt.Sprintf("group %s, rule %d:\n%v\nvs\n%v", a[i]["name"], j, ra[j], rb[j])
			}
		}
		if len(ra) != len(rb) {
			return fmt.Sprintf("group %s has %d rules vs %d", a[i]["name"], len(ra), len(rb))
		}
	}
	return "metadata"
}
