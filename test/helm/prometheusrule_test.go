package helm

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// testAlerts stands in for the chart's files/alerts.yaml: the template must
// carry any rules file into the PrometheusRule unchanged.
const testAlerts = `groups:
  - name: fenceline-test
    rules:
      - alert: FencelineTestAlert
        expr: fenceline_fence_agent_target_reachable == 0
        for: 5m
        labels:
          severity: warning
        annotations:
          summary: "{{ $labels.target }} unreachable"
`

func TestPrometheusRule(t *testing.T) {
	var want map[string]any
	if err := yaml.Unmarshal([]byte(testAlerts), &want); err != nil {
		t.Fatal(err)
	}
	on := "metrics: {prometheusRule: {enabled: true, labels: {release: prom}}}"
	cases := []struct {
		name    string
		alerts  string
		values  string
		wantErr string // empty: renders
	}{
		{name: "off", alerts: testAlerts, values: ""},
		{name: "on", alerts: testAlerts, values: on},
		{name: "empty file", alerts: "", values: on, wantErr: "has no " + alertsFile},
		{name: "not YAML", alerts: "groups: [", values: on, wantErr: "not valid YAML"},
		{name: "no groups", alerts: "rules: []", values: on, wantErr: `top-level "groups" list`},
	}
	base := loadChart(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := renderChart(withAlerts(base, []byte(tc.alerts)), namespace, values(t, tc.values))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rules := find(objs, "PrometheusRule")
			if tc.values == "" {
				if len(rules) != 0 {
					t.Fatalf("%d PrometheusRules rendered while off", len(rules))
				}
				return
			}
			if len(rules) != 1 {
				t.Fatalf("%d PrometheusRules rendered, want 1", len(rules))
			}
			r := rules[0]
			if r.GetAPIVersion() != "monitoring.coreos.com/v1" || r.GetNamespace() != namespace || r.GetLabels()["release"] != "prom" {
				t.Errorf("PrometheusRule %s/%s apiVersion %s labels %v", r.GetNamespace(), r.GetName(), r.GetAPIVersion(), r.GetLabels())
			}
			spec, _, _ := unstructured.NestedMap(r.Object, "spec")
			if !reflect.DeepEqual(spec, want) {
				t.Errorf("spec %v, want the alerts file %v", spec, want)
			}
		})
	}
}

// TestShippedAlertsRender: enabling the PrometheusRule renders the chart's
// files/alerts.yaml, every alert linking to its own section of the
// runbooks: those of the chart's appVersion by default, else under
// metrics.prometheusRule.runbookBaseURL.
func TestShippedAlertsRender(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct{ name, values, base string }{
		{"default: the runbooks of the chart's release", "metrics: {prometheusRule: {enabled: true}}",
			"https://fenceline.io/fenceline/blob/" + c.Metadata.AppVersion + "/docs/runbooks.md"},
		{"a base of the operator's", "metrics: {prometheusRule: {enabled: true, runbookBaseURL: 'https://docs.example.com/ops/runbooks.html'}}",
			"https://docs.example.com/ops/runbooks.html"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := get(t, mustRender(t, c, values(t, tc.values)), "PrometheusRule", "fenceline")
			groups, _, _ := unstructured.NestedSlice(r.Object, "spec", "groups")
			n := 0
			for _, g := range groups {
				rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, rule := range rules {
					alert, _, _ := unstructured.NestedString(rule.(map[string]any), "alert")
					url, _, _ := unstructured.NestedString(rule.(map[string]any), "annotations", "runbook_url")
					if want := tc.base + "#" + strings.ToLower(alert); url != want {
						t.Errorf("%s: runbook_url %q, want %q", alert, url, want)
					}
					n++
				}
			}
			if n == 0 {
				t.Errorf("PrometheusRule from %s has no alerts", alertsFile)
			}
		})
	}
}
