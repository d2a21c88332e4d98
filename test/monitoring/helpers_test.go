// Package monitoring checks deploy/monitoring: the alerting rules (with
// promtool, and against their runbooks), the PrometheusRule copy of them, the
// Grafana dashboard, and that every metric they use is one the components
// register. promtool and promql-metrics come from `make tools`.
package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"fenceline.io/fenceline/test/cluster"
)

// ruleFile is a Prometheus rule file, as far as the checks read it.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

// ruleGroup is one group of rules.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

// rule is an alerting or recording rule.
type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// monitoringDir returns deploy/monitoring of the repository.
func monitoringDir() (string, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", "monitoring"), nil
}

// readYAML reads a YAML file into v.
func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	return nil
}

// readAlerts reads deploy/monitoring/alerts.yaml.
func readAlerts() (ruleFile, error) {
	var f ruleFile
	dir, err := monitoringDir()
	if err != nil {
		return f, err
	}
	return f, readYAML(filepath.Join(dir, "alerts.yaml"), &f)
}

// promtool runs promtool (built by `make tools`) with args and returns its
// combined output.
func promtool(args ...string) (string, error) {
	bin, err := cluster.Tool("promtool")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("promtool %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

// metricNames returns, for each PromQL expression, the metric names it
// selects, as Prometheus's parser reads it (promql-metrics, built by `make
// tools`). An expression that does not parse is an error.
func metricNames(exprs []string) (map[string][]string, error) {
	bin, err := cluster.Tool("promql-metrics")
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(exprs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("promql-metrics: %w: %s", err, stderr.String())
	}
	names := map[string][]string{}
	if err := json.Unmarshal(out, &names); err != nil {
		return nil, fmt.Errorf("reading promql-metrics' answer: %w", err)
	}
	return names, nil
}
