// Package oldpins checks that the fence extension module
// (fenceline.io/fenceline/pkg/fence) is consumable by a CSI driver pinned to
// an older Kubernetes minor and an older Go: requiring it must not move the
// driver's go line, its k8s.io requirements, or its grpc, protobuf and CSI
// spec versions. The driver is the module in consumer/.
package oldpins

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// modFile is the part of `go mod edit -json` the check reads.
type modFile struct {
	Go        string
	Toolchain string
	Require   []struct {
		Path    string
		Version string
	}
}

// pinned reports whether the consumer's requirement on path must not move.
func pinned(path string) bool {
	switch path {
	case "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/container-storage-interface/spec":
		return true
	}
	return strings.HasPrefix(path, "k8s.io/")
}

// moved describes every line of before that after changed: the go line, a
// toolchain line added, and each pinned requirement raised, lowered, added
// or dropped.
func moved(before, after modFile) []string {
	var out []string
	if before.Go != after.Go {
		out = append(out, fmt.Sprintf("go line %s became %s", before.Go, after.Go))
	}
	if before.Toolchain != after.Toolchain {
		out = append(out, fmt.Sprintf("toolchain line %q became %q", before.Toolchain, after.Toolchain))
	}
	versions := func(m modFile) map[string]string {
		v := map[string]string{}
		for _, r := range m.Require {
			if pinned(r.Path) {
				v[r.Path] = r.Version
			}
		}
		return v
	}
	b, a := versions(before), versions(after)
	paths := map[string]bool{}
	for p := range b {
		paths[p] = true
	}
	for p := range a {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		if b[p] != a[p] {
			out = append(out, fmt.Sprintf("%s %q became %q", p, b[p], a[p]))
		}
	}
	return out
}

func TestMoved(t *testing.T) {
	base := func(mutate func(*modFile)) modFile {
		m := modFile{Go: "1.22.0"}
		for _, r := range [][2]string{
			{"k8s.io/client-go", "v0.30.5"}, {"k8s.io/apimachinery", "v0.30.5"},
			{"google.golang.org/grpc", "v1.64.0"}, {"golang.org/x/net", "v0.23.0"},
		} {
			m.Require = append(m.Require, struct{ Path, Version string }{r[0], r[1]})
		}
		if mutate != nil {
			mutate(&m)
		}
		return m
	}
	tests := []struct {
		name  string
		after modFile
		want  []string
	}{
		{name: "nothing moved", after: base(nil)},
		{name: "unpinned dependency raised", after: base(func(m *modFile) { m.Require[3].Version = "v0.40.0" })},
		{name: "go line raised", after: base(func(m *modFile) { m.Go = "1.26.0" }), want: []string{"go line 1.22.0 became 1.26.0"}},
		{name: "toolchain added", after: base(func(m *modFile) { m.Toolchain = "go1.26.8" }), want: []string{`toolchain line "" became "go1.26.8"`}},
		{name: "k8s raised", after: base(func(m *modFile) { m.Require[0].Version = "v0.37.1" }), want: []string{`k8s.io/client-go "v0.30.5" became "v0.37.1"`}},
		{name: "k8s added", after: base(func(m *modFile) {
			m.Require = append(m.Require, struct{ Path, Version string }{"k8s.io/utils", "v0.0.0-2026"})
		}), want: []string{`k8s.io/utils "" became "v0.0.0-2026"`}},
		{name: "grpc raised", after: base(func(m *modFile) { m.Require[2].Version = "v1.83.2" }), want: []string{`google.golang.org/grpc "v1.64.0" became "v1.83.2"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := moved(base(nil), tc.after)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("moved = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOldPinnedConsumer copies consumer/ to a temporary directory, points its
// replace at this checkout's pkg/fence, and runs `go mod tidy`, `go build`
// and `go vet` (which compiles its test, importing pkg/fence/sanity) with the
// local toolchain. Then the consumer's go line and pinned requirements must
// be what they were: requiring the fence module must not drag a driver onto
// this repository's Kubernetes or Go.
//
// It is skipped with -short because it resolves the consumer's Kubernetes
// 1.30-era dependencies, which no other module here uses, so a fresh machine
// downloads them from the Go module proxy.
func TestOldPinnedConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("resolves an old Kubernetes dependency set through the Go module proxy; runs in `make test`")
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(root, "test", "oldpins", "consumer")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goCmd(ctx, t, dir, "mod", "edit", "-replace=fenceline.io/fenceline/pkg/fence="+filepath.Join(root, "pkg", "fence"))
	before := readMod(ctx, t, dir)
	goCmd(ctx, t, dir, "mod", "tidy")
	after := readMod(ctx, t, dir)
	for _, m := range moved(before, after) {
		t.Errorf("requiring fenceline.io/fenceline/pkg/fence moved the consumer's %s", m)
	}
	if t.Failed() {
		data, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
		t.Logf("consumer go.mod after go mod tidy:\n%s", data)
	}
	goCmd(ctx, t, dir, "build", "-o", os.DevNull, "./...")
	goCmd(ctx, t, dir, "vet", "./...")
}

// goCmd runs the go command in dir with the local toolchain only (a newer
// go line in a dependency must fail, not fetch a toolchain) and module
// updates allowed, and fails the test on error.
func goCmd(ctx context.Context, t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in the consumer: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// readMod parses dir/go.mod.
func readMod(ctx context.Context, t *testing.T, dir string) modFile {
	t.Helper()
	var m modFile
	if err := json.Unmarshal(goCmd(ctx, t, dir, "mod", "edit", "-json"), &m); err != nil {
		t.Fatalf("parsing go mod edit -json: %v", err)
	}
	return m
}
