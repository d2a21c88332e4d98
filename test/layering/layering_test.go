// Package layering checks the direction of dependencies between Fenceline's
// own packages: the attacher and controller trees never import each other,
// and the shared leaves import neither. It reads import declarations with
// go/parser, so it needs no build and fails with the file that breaks a rule.
package layering

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"fenceline.io/fenceline/test/cluster"
)

const module = "fenceline.io/fenceline/"

// rule forbids packages under From (test files included unless
// productionOnly) to import anything under one of Not.
type rule struct {
	from           string
	not            []string
	productionOnly bool
}

var rules = []rule{
	// pkg/kubectlplugin calls the decision functions of both trees; no
	// component depends on it.
	{from: "pkg/attacher", not: []string{"pkg/controller", "pkg/fenceagent", "pkg/kubectlplugin", "internal/ctrltest"}},
	{from: "pkg/controller", not: []string{"pkg/attacher", "pkg/fenceagent", "pkg/kubectlplugin"}},
	// The fence agent holds BMC credentials; it shares leaves, never code
	// of the components that delete pods or detach volumes.
	{from: "pkg/fenceagent", not: []string{"pkg/attacher", "pkg/controller", "pkg/kubectlplugin", "internal/ctrltest"}},
	{from: "pkg/cutoff", not: []string{"pkg/attacher", "pkg/controller"}},
	{from: "pkg/kube", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff"}},
	{from: "pkg/names", not: []string{"pkg/"}},
	// The API types and their generated clients are leaves every component
	// may import; they import no component (pkg/names only in tests).
	{from: "api/fencing", not: []string{"pkg/attacher", "pkg/controller", "pkg/fenceagent", "pkg/cutoff", "pkg/kube", "pkg/component", "pkg/generated", "internal", "cmd", "test"}},
	{from: "api/fencing", not: []string{"pkg/"}, productionOnly: true},
	{from: "pkg/generated", not: []string{"pkg/attacher", "pkg/controller", "pkg/fenceagent", "pkg/cutoff", "pkg/kube", "pkg/names", "pkg/component", "internal", "cmd", "test"}},
	// pkg/fence is a module of its own that drivers import without this
	// one: it may import nothing of the main module, tests included.
	{from: "pkg/fence", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff", "pkg/kube", "pkg/names", "pkg/component", "pkg/version", "internal", "cmd", "mock-driver", "test"}},
	{from: "pkg/component", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff"}},
	// kubectl fenceline explain loops over fenceline-controller's table
	// (each Descriptor's explain hook); it imports no controller that the
	// table carries for it. The hooks' contract imports no controller.
	{from: "pkg/kubectlplugin", not: []string{"pkg/controller/podgc", "pkg/controller/quarantine", "pkg/controller/forceeviction", "pkg/controller/tainteviction", "pkg/controller/outofservice"}, productionOnly: true},
	{from: "pkg/controller/explain", not: []string{"pkg/controller/app", "pkg/controller/podgc", "pkg/controller/quarantine", "pkg/controller/forceeviction", "pkg/controller/tainteviction", "pkg/controller/outofservice", "pkg/controller/nodefencing", "pkg/kubectlplugin"}},
	// The one view of a node's inputs is a leaf every controller and the
	// plugin read through.
	{from: "pkg/kube/view", not: []string{"pkg/kubectlplugin", "pkg/component"}},
	{from: "internal/testobj", not: []string{"pkg/attacher", "pkg/controller", "test", "mock-driver"}},
	{from: "pkg", not: []string{"test", "mock-driver"}, productionOnly: true},
}

func TestImportDirection(t *testing.T) {
	found := violations(t, repoRoot(t))
	for _, v := range found {
		t.Error(v)
	}
	if len(found) > 0 {
		t.Log("shared code belongs in a leaf package (pkg/cutoff, pkg/kube, pkg/names) that both sides import")
	}
}

// violations walks the trees the rules name below root and describes every
// import that breaks one.
func violations(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		dir := filepath.Join(root, r.from)
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			continue
		}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			if r.productionOnly && strings.HasSuffix(path, "_test.go") {
				return nil
			}
			for _, imp := range imports(t, path) {
				for _, not := range r.not {
					if strings.HasPrefix(imp, module+not) {
						rel, _ := filepath.Rel(root, path)
						out = append(out, fmt.Sprintf("%s imports %s: %s must not depend on %s", rel, imp, r.from, not))
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", r.from, err)
		}
	}
	return out
}

// TestRulesCatchAViolation makes sure the check itself can fail: in a tree
// where an attacher file imports the controller tree and a shared leaf
// imports the attacher, both are reported, and nothing else.
func TestRulesCatchAViolation(t *testing.T) {
	root := t.TempDir()
	plant := func(rel, imp string) {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		src := "package p\nimport _ \"" + module + imp + "\"\n"
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plant("pkg/attacher/fencing/bad.go", "pkg/controller/actuator")
	plant("pkg/cutoff/bad_test.go", "pkg/attacher/fencing")
	plant("pkg/controller/ok.go", "pkg/cutoff")
	got := violations(t, root)
	if len(got) != 2 || !strings.Contains(got[0], "pkg/attacher/fencing/bad.go") || !strings.Contains(got[1], "pkg/cutoff/bad_test.go") {
		t.Fatalf("violations = %q, want the attacher file and the cutoff test", got)
	}
}

func imports(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := make([]string, 0, len(f.Imports))
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", path, imp.Path.Value, err)
		}
		out = append(out, p)
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}
