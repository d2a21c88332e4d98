// Package codegen checks that the code generated from the repository's
// .proto files and from the fencing API types (clients, CRDs) is what the
// pinned generators produce today.
package codegen

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fenceline.io/fenceline/test/cluster"
)

// generation is one `buf generate` run of `make generate`: the directory it
// runs in (holding its buf.gen.yaml) and the directories of Go code it
// writes, both relative to the repository root.
type generation struct {
	name      string
	dir       string
	generated []string
}

// generations mirrors the `generate` target of the Makefile.
var generations = []generation{
	{name: "fence extension", dir: ".", generated: []string{"pkg/fence/fencev1"}},
	{name: "mock driver protocol", dir: "mock-driver", generated: []string{"api/mock/v1"}},
}

// generatorTools are the executables `make generate` needs: buf and its
// plugins for the .proto files, k8s.io/code-generator and controller-gen for
// the fencing API (hack/update-codegen.sh).
var generatorTools = []string{
	"buf", "protoc-gen-go", "protoc-gen-go-grpc",
	"deepcopy-gen", "client-gen", "lister-gen", "informer-gen", "applyconfiguration-gen", "controller-gen",
}

// TestGeneratedCodeIsUpToDate regenerates the Go code from every .proto with
// the pinned tools into a temporary directory and compares it with the
// committed code, so that an edit to a contract without `make generate`
// (or a hand edit of generated code) fails the build.
func TestGeneratedCodeIsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the code generators; runs in `make test`")
	}
	root := repoRoot(t)
	toolsDir := ensureGeneratorTools(t, root)

	for _, g := range generations {
		t.Run(g.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := exec.CommandContext(t.Context(), filepath.Join(toolsDir, "buf"), "generate", "--template", "buf.gen.yaml", "-o", out)
			cmd.Dir = filepath.Join(root, g.dir)
			cmd.Env = append(os.Environ(), "PATH="+toolsDir+string(os.PathListSeparator)+os.Getenv("PATH"))
			if output, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("buf generate in %s: %v\n%s", g.dir, err, output)
			}
			for _, dir := range g.generated {
				committedDir := filepath.Join(root, g.dir, dir)
				committed := goFiles(t, committedDir)
				generated := goFiles(t, filepath.Join(out, dir))
				if len(generated) == 0 {
					t.Fatalf("buf generate wrote no Go files under %s", dir)
				}
				if !slices.Equal(slices.Sorted(maps.Keys(committed)), slices.Sorted(maps.Keys(generated))) {
					t.Errorf("generated files %v, committed files %v in %s: run `make generate`",
						slices.Sorted(maps.Keys(generated)), slices.Sorted(maps.Keys(committed)), committedDir)
				}
				for name, want := range generated {
					if got, ok := committed[name]; ok && !bytes.Equal(got, want) {
						t.Errorf("%s/%s differs from the generator's output: run `make generate`", filepath.Join(g.dir, dir), name)
					}
				}
			}
		})
	}
}

// repoRoot returns the repository root, which holds go.mod and the buf
// configuration.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "buf.gen.yaml", "buf.yaml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("repository root %s: %v", root, err)
		}
	}
	return root
}

// ensureGeneratorTools returns the directory holding the pinned generators,
// installing them with `make generate-tools` if needed. It skips the test
// (with the reason) only when they cannot be installed, for example without
// access to the Go module proxy.
func ensureGeneratorTools(t *testing.T, root string) string {
	t.Helper()
	dir, err := cluster.ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	if missingTools(dir) == nil {
		return dir
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("code generators %v missing from %s and no make to install them: %v", missingTools(dir), dir, err)
	}
	t.Logf("installing code generators %v into %s with `make generate-tools` (first time: a few minutes)", missingTools(dir), dir)
	cmd := exec.CommandContext(t.Context(), makeBin, "generate-tools")
	cmd.Dir = root
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot install the code generators (`make generate-tools`: %v); generated code not checked:\n%s", err, output)
	}
	// The Makefile installs into the repository's tool cache.
	installed := filepath.Join(root, ".cache", "tools", "bin")
	if missing := missingTools(installed); missing != nil {
		t.Fatalf("`make generate-tools` succeeded but %v are still missing from %s", missing, installed)
	}
	return installed
}

func missingTools(dir string) []string {
	var missing []string
	for _, tool := range generatorTools {
		if _, err := os.Stat(filepath.Join(dir, tool)); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, tool)
		}
	}
	return missing
}

// goFiles reads every generated (.pb.go) file directly in dir; hand-written
// files such as doc.go sit next to them and are not compared.
func goFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".pb.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("reading %s: %v", e.Name(), err)
		}
		files[e.Name()] = b
	}
	return files
}
