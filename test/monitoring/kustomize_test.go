package monitoring

import (
	"bytes"
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
	overlay := t.TempDir()
	rel := func(dir string) string {
		p, err := filepath.Rel(overlay, filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		return filepath.ToSlash(p)
	}
	kust := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel("deploy") +
		"\ncomponents:\n  - " + rel("deploy/monitoring") + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	with := renderKinds(t, overlay)
	without := renderKinds(t, filepath.Join(root, "deploy"))
	for _, key := range []string{"PrometheusRule fenceline-system/fenceline", "ConfigMap fenceline-system/fenceline-grafana-dashboard"} {
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
