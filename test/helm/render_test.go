package helm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/deploy"
)

// alertsFile is the chart file the PrometheusRule takes its rules from.
const alertsFile = "files/alerts.yaml"

// repoRoot returns the repository root or fails the test.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadChart loads the chart from the working tree or fails the test.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// values parses a YAML values document, as `helm install -f` would.
func values(t testing.TB, doc string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("values %q: %v", doc, err)
	}
	return v
}

// renderChart renders the chart's templates as `helm install` into ns
// would, and returns the objects in template file order (CRDs are not
// templates; see crdObjects).
func renderChart(c *chart.Chart, ns string, vals map[string]any) ([]unstructured.Unstructured, error) {
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: "fenceline", Namespace: ns, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	var objs []unstructured.Unstructured
	for _, name := range names {
		// Partials render to nothing; NOTES.txt is text for the user.
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		o, err := deploy.DecodeObjects([]byte(files[name]))
		if err != nil {
			return nil, fmt.Errorf("%s does not decode: %w\n%s", name, err, files[name])
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// mustRender renders the chart or fails the test.
func mustRender(t testing.TB, c *chart.Chart, vals map[string]any) []unstructured.Unstructured {
	t.Helper()
	objs, err := renderChart(c, namespace, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("the chart rendered no objects")
	}
	return objs
}

// crdObjects decodes the chart's crds/ directory, which Helm installs
// before the templates.
func crdObjects(t testing.TB, c *chart.Chart) []unstructured.Unstructured {
	t.Helper()
	var objs []unstructured.Unstructured
	for _, crd := range c.CRDObjects() {
		o, err := deploy.DecodeObjects(crd.File.Data)
		if err != nil {
			t.Fatalf("%s: %v", crd.Name, err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// withAlerts returns the chart with files/alerts.yaml replaced by data, or
// removed if data is nil.
func withAlerts(c *chart.Chart, data []byte) *chart.Chart {
	files := slices.DeleteFunc(slices.Clone(c.Files), func(f *chart.File) bool { return f.Name == alertsFile })
	if data != nil {
		files = append(files, &chart.File{Name: alertsFile, Data: data})
	}
	out := *c
	out.Files = files
	return &out
}

// find returns the objects of that kind, in rendering order.
func find(objs []unstructured.Unstructured, kind string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// get returns the object of that kind and name, or fails the test.
func get(t testing.TB, objs []unstructured.Unstructured, kind, name string) unstructured.Unstructured {
	t.Helper()
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return unstructured.Unstructured{}
}

// has says whether an object of that kind and name was rendered.
func has(objs []unstructured.Unstructured, kind, name string) bool {
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			return true
		}
	}
	return false
}
