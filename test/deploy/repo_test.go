package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"fenceline.io/fenceline/test/cluster"
)

// repoRoot returns the repository root or fails the test.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatalf("finding repository root: %v", err)
	}
	return root
}

// readRepoFile reads a file given relative to the repository root.
func readRepoFile(t testing.TB, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return string(data)
}

// makeVariable returns the value of a simple `NAME := value` line of the
// Makefile.
func makeVariable(t testing.TB, makefile, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:?=\s*(.*)$`)
	m := re.FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile defines no %s", name)
	}
	return strings.TrimSpace(m[1])
}

// makeRecipe returns the recipe lines of a Makefile target, with line
// continuations joined.
func makeRecipe(t testing.TB, makefile, target string) string {
	t.Helper()
	lines := strings.Split(makefile, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, target+":") {
			continue
		}
		var recipe []string
		for _, r := range lines[i+1:] {
			if !strings.HasPrefix(r, "\t") {
				break
			}
			recipe = append(recipe, strings.TrimSpace(r))
		}
		return strings.ReplaceAll(strings.Join(recipe, "\n"), "\\\n", " ")
	}
	t.Fatalf("Makefile has no target %s", target)
	return ""
}

// imageBinaries returns the binaries `make build` produces, which the image
// must carry.
func imageBinaries(t testing.TB) []string {
	t.Helper()
	bins := strings.Fields(makeVariable(t, readRepoFile(t, "Makefile"), "BINARIES"))
	if len(bins) == 0 {
		t.Fatal("Makefile BINARIES is empty")
	}
	return bins
}
