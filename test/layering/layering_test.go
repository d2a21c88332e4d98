// Package layering checks the direction of dependencies between Fenceline's
// own packages: the attacher and controller trees never import each other,
// and the shared leaves import neither. It reads import declarations with
// go/parser, so it needs no build and fails with the file that breaks a rule.
package layering

import (
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
	{from: "pkg/attacher", not: []string{"pkg/controller"}},
	{from: "pkg/controller", not: []string{"pkg/attacher"}},
	{from: "pkg/cutoff", not: []string{"pkg/attacher", "pkg/controller"}},
	{from: "pkg/kube", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff"}},
	{from: "pkg/names", not: []string{"pkg/"}},
	{from: "pkg/fence", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff", "pkg/kube"}},
	{from: "pkg/component", not: []string{"pkg/attacher", "pkg/controller", "pkg/cutoff"}},
	{from: "internal/testobj", not: []string{"pkg/attacher", "pkg/controller", "test", "mock-driver"}},
	{from: "pkg", not: []string{"test", "mock-driver"}, productionOnly: true},
}

func TestImportDirection(t *testing.T) {
	root := repoRoot(t)
	violations := 0
	for _, r := range rules {
		err := filepath.WalkDir(filepath.Join(root, r.from), func(path string, d fs.DirEntry, err error) error {
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
						t.Errorf("%s imports %s: %s must not depend on %s", rel, imp, r.from, not)
						violations++
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", r.from, err)
		}
	}
	if violations > 0 {
		t.Log("shared code belongs in a leaf package (pkg/cutoff, pkg/kube, pkg/names) that both sides import")
	}
}

// TestRulesCatchAViolation makes sure the check itself can fail: a file in
// the attacher tree that imports the controller tree is reported.
func TestRulesCatchAViolation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.go")
	src := "package bad\nimport _ \"" + module + "pkg/controller/actuator\"\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got := imports(t, path)
	if len(got) != 1 || !strings.HasPrefix(got[0], module+rules[0].not[0]) {
		t.Fatalf("imports(bad.go) = %v, want the controller package matched by the attacher rule", got)
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
