package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"fenceline.io/fenceline/test/cluster"
)

// kubectl returns the path of the kubectl that `make tools` builds. Without
// it the test is skipped under -short (make test-unit) and fails otherwise.
func kubectl(t testing.TB) string {
	t.Helper()
	p, err := cluster.Tool("kubectl")
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	return p
}

// runKubectl runs kubectl and returns its stdout and stderr; a non-zero exit
// fails the test with both.
func runKubectl(t testing.TB, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(kubectl(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

// kustomizations returns every directory below deploy/ holding a
// kustomization.yaml, relative to the repository root.
func kustomizations(t testing.TB) []string {
	t.Helper()
	return deployFiles(t, func(name string) bool { return name == "kustomization.yaml" }, true)
}

// plainManifests returns every YAML file below deploy/ that is not a
// kustomization file (nor part of the Helm chart in deploy/helm).
func plainManifests(t testing.TB) []string {
	t.Helper()
	return deployFiles(t, func(name string) bool {
		return (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) && name != "kustomization.yaml"
	}, false)
}

func deployFiles(t testing.TB, match func(string) bool, dirs bool) []string {
	t.Helper()
	root := repoRoot(t)
	var out []string
	// Not manifests for a bare cluster: the Helm chart's templates and
	// values (test/helm renders and checks them), and deploy/monitoring's
	// Prometheus rule files, their tests and a kustomize component of
	// Prometheus Operator objects whose CRDs a bare cluster lacks
	// (test/monitoring checks them).
	skip := []string{filepath.Join(root, "deploy", "helm"), filepath.Join(root, "deploy", "monitoring")}
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && slices.Contains(skip, path) {
			return fs.SkipDir
		}
		if err != nil || d.IsDir() || !match(d.Name()) {
			return err
		}
		if dirs {
			path = filepath.Dir(path)
		}
		rel, err := filepath.Rel(root, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatalf("walking deploy/: %v", err)
	}
	sort.Strings(out)
	return out
}

// render runs `kubectl kustomize` on a directory relative to the repository
// root (or absolute) and decodes the result.
func render(t testing.TB, dir string) []unstructured.Unstructured {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repoRoot(t), dir)
	}
	objs, err := Kustomize(kubectl(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatalf("kustomize %s rendered no objects", dir)
	}
	return objs
}

// readManifest decodes a plain manifest file relative to the repository root.
func readManifest(t testing.TB, rel string) []unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		t.Fatalf("decoding %s: %v", rel, err)
	}
	return objs
}

// workload is a pod-creating object with its decoded pod template.
type workload struct {
	Kind, Namespace, Name string
	Replicas              *int64
	Pod                   corev1.PodSpec
}

func workloads(t testing.TB, objs []unstructured.Unstructured) []workload {
	t.Helper()
	var out []workload
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
		default:
			continue
		}
		spec, found, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if err != nil || !found {
			t.Fatalf("%s %s has no pod template: %v", o.GetKind(), o.GetName(), err)
		}
		w := workload{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(spec, &w.Pod, true); err != nil {
			t.Fatalf("%s %s: decoding pod template: %v", o.GetKind(), o.GetName(), err)
		}
		if r, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); found {
			w.Replicas = &r
		}
		out = append(out, w)
	}
	return out
}

// findObject returns the object of that kind and name, or fails.
func findObject(t testing.TB, objs []unstructured.Unstructured, kind, name string) unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among the rendered objects", kind, name)
	return unstructured.Unstructured{}
}
