package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsumeWithReplace follows docs/release.md's way of using the
// modules before fenceline.io serves their import paths: a replace
// directive to a clone (here, this checkout), then `go get` at the
// release's version, `go mod tidy` and a build. A driver module needs the
// fence module alone; a module importing the main module needs both
// replaces, as the main module's own replace of pkg/fence does not carry
// over to its users.
func TestConsumeWithReplace(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves modules and builds a program")
	}
	repo := repoRoot(t)
	for _, tc := range []struct {
		name, module, importPath, use string
		replaces                      []string
	}{
		{"driver", "fenceline.io/fenceline/pkg/fence", "fenceline.io/fenceline/pkg/fence", "fence.Capabilities{UnpublishFence: true}",
			[]string{"fenceline.io/fenceline/pkg/fence=" + filepath.Join(repo, "pkg", "fence")}},
		{"main module", "fenceline.io/fenceline", "fenceline.io/fenceline/pkg/names", "names.OutOfServiceTaint",
			[]string{"fenceline.io/fenceline=" + repo, "fenceline.io/fenceline/pkg/fence=" + filepath.Join(repo, "pkg", "fence")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"" + tc.importPath + "\"\n)\n\nfunc main() { fmt.Println(" + tc.use + ") }\n"
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			goCmd(t, dir, "mod", "init", "example.com/consumer")
			for _, r := range tc.replaces {
				goCmd(t, dir, "mod", "edit", "-replace="+r)
			}
			goCmd(t, dir, "get", tc.module+"@v0.1.0")
			goCmd(t, dir, "mod", "tidy")
			goCmd(t, dir, "build", "-o", filepath.Join(dir, "consumer"), ".")
		})
	}
}

// goCmd runs the go command in dir as a user's shell would, without this
// repository's workspace or flags.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
