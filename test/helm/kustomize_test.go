package helm

import (
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/deploy"
)

// key names an object independently of its labels.
type key struct{ kind, namespace, name string }

func keyOf(o unstructured.Unstructured) key { return key{o.GetKind(), o.GetNamespace(), o.GetName()} }

// TestChartMatchesKustomize: with its default values in fenceline-system,
// the chart installs what `kubectl apply -k deploy/` does, so either way of
// installing gets the same Deployments, PodDisruptionBudgets, RBAC and
// CRDs, and one can replace the other. Labels differ (the chart adds
// Helm's) and so do the image references, checked on their own; the
// namespace is Helm's to create; the metrics Services are the chart's
// only additions.
func TestChartMatchesKustomize(t *testing.T) {
	kubectl, err := cluster.Tool("kubectl")
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	kust, err := deploy.Kustomize(kubectl, filepath.Join(repoRoot(t), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	c := loadChart(t)
	helmObjs := append(crdObjects(t, c), mustRender(t, c, nil)...)
	got := map[key]unstructured.Unstructured{}
	for _, o := range helmObjs {
		if _, dup := got[keyOf(o)]; dup {
			t.Errorf("the chart renders %v twice", keyOf(o))
		}
		got[keyOf(o)] = o
	}
	for _, want := range kust {
		k := keyOf(want)
		if k.kind == "Namespace" {
			continue
		}
		o, ok := got[k]
		if !ok {
			t.Errorf("deploy/ has %s %s/%s, the chart does not", k.kind, k.namespace, k.name)
			continue
		}
		delete(got, k)
		checkImages(t, o, c.Metadata.AppVersion)
		if a, b := normalize(t, want), normalize(t, o); !reflect.DeepEqual(a, b) {
			t.Errorf("%s %s differs from deploy/:\nkustomize: %v\nchart:     %v", k.kind, k.name, a, b)
		}
	}
	for k := range got {
		if k.kind != "Service" {
			t.Errorf("the chart renders %s %s/%s, deploy/ does not", k.kind, k.namespace, k.name)
		}
	}
}

// normalize returns the object without what may differ between the two
// installs: labels and container images.
func normalize(t *testing.T, o unstructured.Unstructured) map[string]any {
	t.Helper()
	out := o.DeepCopy().Object
	unstructured.RemoveNestedField(out, "metadata", "labels")
	unstructured.RemoveNestedField(out, "spec", "template", "metadata", "labels")
	containers, found, err := unstructured.NestedSlice(out, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	if found {
		for _, c := range containers {
			delete(c.(map[string]any), "image")
		}
		if err := unstructured.SetNestedSlice(out, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkImages: each chart container runs the image named after it, tagged
// with the chart's appVersion.
func checkImages(t *testing.T, o unstructured.Unstructured, appVersion string) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		m := c.(map[string]any)
		if want := m["name"].(string) + ":" + appVersion; m["image"] != want {
			t.Errorf("%s %s container %s: image %v, want %s", o.GetKind(), o.GetName(), m["name"], m["image"], want)
		}
	}
}
