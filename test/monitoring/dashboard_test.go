package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	// Panels are a collapsed row's panels.
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	dir, err := monitoringDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana-dashboard.json is not valid JSON: %v", err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardExprs maps a name for each query to its PromQL.
func dashboardExprs(d dashboard) map[string]string {
	out := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			out[fmt.Sprintf("panel %d (%s) query %s", p.ID, p.Title, tg.RefID)] = tg.Expr
		}
	}
	return out
}

func TestDashboardStructure(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion <= 0 {
		t.Errorf("dashboard needs uid, title and schemaVersion: got %q, %q, %d", d.UID, d.Title, d.SchemaVersion)
	}
	dsVar := ""
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Query == "prometheus" {
			dsVar = v.Name
		}
	}
	if dsVar == "" {
		t.Fatal("dashboard has no Prometheus datasource variable in templating.list")
	}
	wantDS := "${" + dsVar + "}"
	ids := map[int]string{}
	queries := 0
	for _, p := range allPanels(d.Panels) {
		where := fmt.Sprintf("panel %d (%s)", p.ID, p.Title)
		if p.ID <= 0 {
			t.Errorf("%s: id must be positive", where)
		}
		if other, dup := ids[p.ID]; dup {
			t.Errorf("%s: id also used by %q", where, other)
		}
		ids[p.ID] = p.Title
		if p.Title == "" || p.Type == "" {
			t.Errorf("%s: needs a type and a title", where)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v is not on Grafana's 24-column grid", where, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != wantDS {
			t.Errorf("%s: datasource %+v, want the variable %s", where, p.Datasource, wantDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no queries", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			queries++
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q empty or repeated", where, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s query %s: empty expr", where, tg.RefID)
			}
			if tg.Datasource != nil && tg.Datasource.UID != wantDS {
				t.Errorf("%s query %s: datasource %+v, want %s", where, tg.RefID, tg.Datasource, wantDS)
			}
		}
	}
	if queries == 0 {
		t.Fatal("dashboard has no queries")
	}
}

// Every panel's query is valid PromQL: promtool checks them as the
// expressions of recording rules. Grafana's template variables ($job) only
// appear inside label matchers' strings, where PromQL takes them as text.
func TestDashboardQueriesArePromQL(t *testing.T) {
	d := readDashboard(t)
	var rules []rule
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "$__") {
				t.Errorf("panel %d query %s: uses a Grafana macro, which Prometheus cannot evaluate on its own: %s", p.ID, tg.RefID, tg.Expr)
			}
			// The record name tells which panel a parse error is in.
			rules = append(rules, rule{Record: fmt.Sprintf("fenceline_dashboard:panel%d_%s", p.ID, tg.RefID), Expr: tg.Expr})
		}
	}
	b, err := yaml.Marshal(ruleFile{Groups: []ruleGroup{{Name: "dashboard", Rules: rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := promtool("check", "rules", path); err != nil {
		t.Fatal(err)
	}
}
