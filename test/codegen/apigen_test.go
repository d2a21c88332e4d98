package codegen

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// apiGenerated are the outputs of hack/update-codegen.sh (the API part of
// `make generate`), relative to the repository root: a directory stands for
// every file below it.
var apiGenerated = []string{
	"api/fencing/v1alpha1/zz_generated.deepcopy.go",
	"pkg/generated/applyconfiguration",
	"pkg/generated/clientset",
	"pkg/generated/informers",
	"pkg/generated/listers",
	"deploy/crds/fenceline.io_fencingrequests.yaml",
	"deploy/crds/fenceline.io_fenceclasses.yaml",
	"deploy/crds/fenceline.io_fencetargets.yaml",
	"deploy/crds/fenceline.io_fencepolicies.yaml",
	"deploy/crds/fenceline.io_storagefences.yaml",
	"deploy/crds/fenceline.io_fencelineremediations.yaml",
	"deploy/crds/fenceline.io_fencelineremediationtemplates.yaml",
}

// TestAPIGeneratedCodeIsUpToDate regenerates the deepcopy functions, the
// clientset, listers, informers, apply configurations and CRDs from the
// fencing API types into a copy of the module and compares them with the
// committed files, so that an edit to api/fencing without `make generate`
// (or a hand edit of generated code or CRDs) fails the build.
func TestAPIGeneratedCodeIsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the code generators; runs in `make test`")
	}
	root := repoRoot(t)
	toolsDir := ensureGeneratorTools(t, root)

	out := apiModuleCopy(t, root)
	generateAPI(t, root, toolsDir, out)
	if diffs := compareAPIGenerated(t, root, out); len(diffs) > 0 {
		for _, d := range diffs {
			t.Error(d)
		}
		t.Log("run `make generate` and commit the result")
	}
}

// TestAPIDriftIsDetected proves that the comparison above is not vacuous: a
// field added to a type without regeneration must show up as a difference
// in the deepcopy functions, the apply configurations and the CRD.
func TestAPIDriftIsDetected(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the code generators; runs in `make test`")
	}
	root := repoRoot(t)
	toolsDir := ensureGeneratorTools(t, root)

	out := apiModuleCopy(t, root)
	types := filepath.Join(out, "api", "fencing", "v1alpha1", "fencetarget_types.go")
	src, err := os.ReadFile(types)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "type FenceTargetSpec struct {\n"
	if !bytes.Contains(src, []byte(anchor)) {
		t.Fatalf("%s has no %q to add a field to", types, anchor)
	}
	src = bytes.Replace(src, []byte(anchor), []byte(anchor+"\t// Drift is a field the committed code does not know.\n\t// +optional\n\tDrift []string `json:\"drift,omitempty\"`\n\n"), 1)
	if err := os.WriteFile(types, src, 0o644); err != nil {
		t.Fatal(err)
	}
	generateAPI(t, root, toolsDir, out)
	diffs := strings.Join(compareAPIGenerated(t, root, out), "\n")
	for _, want := range []string{
		"api/fencing/v1alpha1/zz_generated.deepcopy.go",
		"pkg/generated/applyconfiguration/fencing/v1alpha1/fencetargetspec.go",
		"deploy/crds/fenceline.io_fencetargets.yaml",
	} {
		if !strings.Contains(diffs, want) {
			t.Errorf("a new field in FenceTargetSpec went unnoticed in %s; differences found:\n%s", want, diffs)
		}
	}
}

// apiModuleCopy copies what hack/update-codegen.sh reads (go.mod, go.sum
// and the API types) into a temporary module root, so that generating there
// never touches the working tree.
func apiModuleCopy(t *testing.T, root string) string {
	t.Helper()
	out := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		copyFile(t, filepath.Join(root, f), filepath.Join(out, f))
	}
	api := filepath.Join("api", "fencing")
	err := filepath.WalkDir(filepath.Join(root, api), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		copyFile(t, path, filepath.Join(out, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Modules the main module replaces with a directory must resolve from
	// the copy too.
	cmd := exec.CommandContext(t.Context(), "go", "mod", "edit",
		"-replace=fenceline.io/fenceline/pkg/fence="+filepath.Join(root, "pkg", "fence"))
	cmd.Dir = out
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod edit: %v\n%s", err, output)
	}
	return out
}

// generateAPI runs the repository's hack/update-codegen.sh on the module
// copy in out.
func generateAPI(t *testing.T, root, toolsDir, out string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "hack", "update-codegen.sh"), out)
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "TOOLS_BIN="+toolsDir, "GOFLAGS=-mod=mod")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/update-codegen.sh: %v\n%s", err, output)
	}
}

// compareAPIGenerated describes every difference between the generated
// files in the repository and in out.
func compareAPIGenerated(t *testing.T, root, out string) []string {
	t.Helper()
	var diffs []string
	for _, p := range apiGenerated {
		committed, generated := treeFiles(t, root, p), treeFiles(t, out, p)
		if len(generated) == 0 {
			diffs = append(diffs, "the generators wrote nothing for "+p)
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(generated)) {
			got, ok := committed[name]
			switch {
			case !ok:
				diffs = append(diffs, name+" is generated but not committed")
			case !bytes.Equal(got, generated[name]):
				diffs = append(diffs, name+" differs from the generators' output")
			}
		}
		for _, name := range slices.Sorted(maps.Keys(committed)) {
			if _, ok := generated[name]; !ok {
				diffs = append(diffs, name+" is committed but no longer generated")
			}
		}
	}
	return diffs
}

// treeFiles reads the file rel below base, or every file below the
// directory rel, keyed by slash-separated path relative to base. A missing
// rel reads as no files.
func treeFiles(t *testing.T, base, rel string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(filepath.Join(base, rel), func(path string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		name, err := filepath.Rel(base, path)
		files[filepath.ToSlash(name)] = b
		return err
	})
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return files
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
