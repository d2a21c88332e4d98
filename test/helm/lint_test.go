package helm

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// TestChartLint runs `helm lint`'s checks (Chart.yaml, values, templates,
// rendered YAML, Kubernetes names, deprecated APIs) for the value sets that
// turn optional objects on. Only informational notes (such as "icon is
// recommended") may remain.
func TestChartLint(t *testing.T) {
	dir := filepath.Join(repoRoot(t), chartDir)
	sets := map[string]string{
		"defaults":       "",
		"driver binding": "driverServiceAccounts: [{name: csi-driver, namespace: kube-system}]",
		"monitoring":     "metrics: {serviceMonitor: {enabled: true}}",
	}
	for name, doc := range sets {
		t.Run(name, func(t *testing.T) {
			linter := lint.All(dir, values(t, doc), namespace, false)
			for _, m := range linter.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}
