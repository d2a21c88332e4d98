package deploy

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ignoreRule is one line of a .dockerignore file.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
	text   string
}

// parseDockerignore compiles .dockerignore patterns the way the Docker
// builder reads them: paths are relative to the context root, '*' and '?' do
// not cross '/', '**' matches any number of directories, '!' re-includes, and
// the last matching line wins.
func parseDockerignore(t testing.TB, text string) []ignoreRule {
	t.Helper()
	var rules []ignoreRule
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{text: line}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			r.negate, line = true, rest
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		r.re = regexp.MustCompile(re.String())
		rules = append(rules, r)
	}
	return rules
}

// ignored reports whether path (slash-separated, relative to the context) is
// left out of the build context: a pattern that matches one of its parent
// directories leaves out everything below it.
func ignored(rules []ignoreRule, path string) bool {
	out := false
	for _, r := range rules {
		p := path
		for {
			if r.re.MatchString(p) {
				out = !r.negate
				break
			}
			i := strings.LastIndex(p, "/")
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	return out
}

func TestDockerignoreMatching(t *testing.T) {
	rules := parseDockerignore(t, "# comment\n.git\n/bin\n**/*.test\ndocs\n!docs/keep.md\ntest/output\n")
	tests := []struct {
		path string
		want bool
	}{
		{".git/HEAD", true},
		{"bin/fenceline-attacher", true},
		{"cmd/bin/x.go", false},
		{"pkg/fence/fence.test", true},
		{"fence.test", true},
		{"docs/deploy.md", true},
		{"docs/keep.md", false},
		{"test/output/run/log", true},
		{"test/deploy/x_test.go", false},
		{".gitignore", false},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			if got := ignored(rules, tc.path); got != tc.want {
				t.Errorf("ignored(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

// buildPackages returns the package patterns of the Makefile's build target.
func buildPackages(t testing.TB) []string {
	t.Helper()
	var pkgs []string
	for _, f := range strings.Fields(makeRecipe(t, readRepoFile(t, "Makefile"), "build")) {
		if strings.HasPrefix(f, "./") {
			pkgs = append(pkgs, f)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("make build names no ./packages")
	}
	return pkgs
}

// TestBuildContext checks that the Docker build context keeps every file
// `make build` needs (all Go and embedded files of this module's packages the
// binaries depend on, and of the nested modules it replaces with a directory
// of the checkout, such as pkg/fence) and leaves out local state such as .git
// and the tool cache.
func TestBuildContext(t *testing.T) {
	root := repoRoot(t)
	rules := parseDockerignore(t, readRepoFile(t, ".dockerignore"))

	args := append([]string{"list", "-deps", "-f",
		`{{if .Module}}{{if or .Module.Main .Module.Replace}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`},
		buildPackages(t)...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	needed := []string{"go.mod", "go.sum", "Makefile", "pkg/fence/go.mod", "pkg/fence/go.sum"}
	for _, abs := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			t.Fatalf("relative path of %s: %v", abs, err)
		}
		needed = append(needed, filepath.ToSlash(rel))
	}
	if len(needed) < 10 {
		t.Fatalf("go list found only %d files; the check would prove nothing:\n%s", len(needed), out)
	}
	for _, f := range needed {
		if ignored(rules, f) {
			t.Errorf("%s is needed by make build but .dockerignore leaves it out of the build context", f)
		}
	}
	for _, f := range []string{".git/HEAD", ".cache/tools/bin/kube-apiserver", "bin/fenceline-attacher", "test/output/x/log"} {
		if !ignored(rules, f) {
			t.Errorf("%s is local state and should be left out of the build context", f)
		}
	}
}
