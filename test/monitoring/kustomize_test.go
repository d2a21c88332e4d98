package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"fenceline.io/fenceline/test/cluster"
)

// The component renders on top of deploy/ as docs/runbooks.md tells users to
// use it: the base stays whole, and the PrometheusRule and the dashboard's
// ConfigMap join it in fenceline-system. deploy/ itself stays without them.
func TestKustomizeComponent(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	with := renderKinds(t, componentOverlay(t, ""))
	without := renderKinds(t, filepath.Join(root, "deploy"))
	for _, key := range []string{"PrometheusRule fenceline-system/fenceline", "ConfigMap fenceline-system/fenceline-grafana-dashboard",
		"PodMonitor fenceline-system/fenceline-controller", "PodMonitor fenceline-system/fenceline-fence-agent", "PodMonitor fenceline-system/fenceline-attacher"} {
		if _, ok := with[key]; !ok {
			t.Errorf("the overlay with the component lacks %s", key)
		}
		if _, ok := without[key]; ok {
			t.Errorf("deploy/ renders %s without the component; monitoring must stay optional", key)
		}
	}
	for key := range without {
		if _, ok := with[key]; !ok {
			t.Errorf("the component drops %s of the base", key)
		}
	}
	cm := with["ConfigMap fenceline-system/fenceline-grafana-dashboard"]
	dash, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := cm["data"].(map[string]any); data["grafana-dashboard.json"] != string(dash) {
		t.Error("the dashboard ConfigMap does not hold grafana-dashboard.json as it is")
	}
	if labels, _ := cm["metadata"].(map[string]any)["labels"].(map[string]any); labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap's labels %v lack grafana_dashboard: \"1\" (Grafana's sidecar looks for it)", labels)
	}
}

// renderKinds runs `kubectl kustomize dir` and keys the objects by
// "Kind namespace/name".
func renderKinds(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	kubectl, err := cluster.Tool("kubectl")
	if err != nil {
		// As test/deploy: kubectl comes with the control plane, which
		// make test-unit does not build.
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	objs := map[string]map[string]any{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("decoding kustomize output of %s: %v", dir, err)
		}
		if o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		objs[o["kind"].(string)+" "+stringOf(md["namespace"])+"/"+stringOf(md["name"])] = o
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize %s rendered nothing", dir)
	}
	return objs
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

// The overlay docs/runbooks.md shows for pointing the runbook links
// elsewhere does: every alert of the PrometheusRule links to the new base
// plus its own section, and the ConfigMap that carries the base is not
// applied.
func TestKustomizeRunbookBase(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippet, base := runbookOverlaySnippet(t, string(doc))
	objs := renderKinds(t, componentOverlay(t, snippet))
	for key := range objs {
		if strings.HasPrefix(key, "ConfigMap ") && strings.HasSuffix(key, "/fenceline-runbooks") {
			t.Errorf("the overlay applies %s; it should only feed the replacement", key)
		}
	}
	var pr struct {
		Spec ruleFile `json:"spec"`
	}
	convert(t, "PrometheusRule", objs["PrometheusRule fenceline-system/fenceline"], &pr)
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if want := base + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
		}
	}
	if n == 0 {
		t.Fatal("the overlay's PrometheusRule has no alerts")
	}
}

// runbookOverlaySnippet returns the YAML block of docs/runbooks.md that
// sets the runbook base with a replacement, and the base it sets.
func runbookOverlaySnippet(t *testing.T, doc string) (snippet, base string) {
	t.Helper()
	for _, block := range strings.Split(doc, "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if !strings.Contains(body, "replacements:") {
			continue
		}
		var k struct {
			ConfigMapGenerator []struct {
				Literals []string `json:"literals"`
			} `json:"configMapGenerator"`
		}
		if err := yaml.Unmarshal([]byte(dedent(body)), &k); err != nil {
			t.Fatalf("docs/runbooks.md's replacement overlay: %v", err)
		}
		for _, g := range k.ConfigMapGenerator {
			for _, l := range g.Literals {
				if v, ok := strings.CutPrefix(l, "base="); ok {
					return dedent(body), v
				}
			}
		}
	}
	t.Fatal("docs/runbooks.md shows no overlay with replacements and a base= literal")
	return "", ""
}

// dedent removes the indentation of a block's first line from every line
// (a code block inside a list item is indented).
func dedent(s string) string {
	first := strings.SplitN(s, "\n", 2)[0]
	indent := first[:len(first)-len(strings.TrimLeft(first, " "))]
	var out []string
	for _, l := range strings.Split(s, "\n") {
		out = append(out, strings.TrimPrefix(l, indent))
	}
	return strings.Join(out, "\n")
}

// componentOverlay writes an overlay as docs/runbooks.md tells users to
// write one, deploy/ with the monitoring component, plus extra (more of
// the kustomization), and returns its directory.
func componentOverlay(t *testing.T, extra string) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	rel := func(dir string) string {
		p, err := filepath.Rel(overlay, filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(p)
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\ncomponents:\n  - %s\n%s",
		rel("deploy"), rel("deploy/monitoring"), extra)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}
