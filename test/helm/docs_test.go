package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// chartSnippet matches the YAML blocks of docs/helm.md that are values for
// this chart (their first line says so).
var chartSnippet = regexp.MustCompile("(?s)```yaml\n *# values for deploy/helm/fenceline\n(.*?)```")

// TestDocsValuesRender renders the chart with every values snippet of
// docs/helm.md meant for it: each must render and bind the driver
// ServiceAccounts it lists.
func TestDocsValuesRender(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "helm.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippets := chartSnippet.FindAllStringSubmatch(string(data), -1)
	if len(snippets) == 0 {
		t.Fatal("docs/helm.md has no values snippet for the chart")
	}
	c := loadChart(t)
	for i, m := range snippets {
		doc := dedent(m[1])
		vals := values(t, doc)
		objs := mustRender(t, c, vals)
		sas, _ := vals["driverServiceAccounts"].([]any)
		if len(sas) == 0 {
			continue
		}
		b := decode[rbacv1.ClusterRoleBinding](t, get(t, objs, "ClusterRoleBinding", "fenceline-attacher-fencing"))
		if len(b.Subjects) != len(sas) {
			t.Errorf("snippet %d binds %d ServiceAccounts, lists %d:\n%s", i, len(b.Subjects), len(sas), doc)
		}
	}
}

// dedent removes the indentation of the first line from every line.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}
