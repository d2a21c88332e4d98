package deploy

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// binary returns the path of one of our binaries built by `make build`.
// Without it the test is skipped under -short and fails otherwise.
func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := cluster.Binary(name)
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	return p
}

// TestManifestArgsParse runs each container's binary with the exact
// arguments of the manifest plus --version. Every binary parses all flags
// before it acts on --version, so an unknown or malformed argument makes it
// exit non-zero here instead of crash-looping in a cluster.
func TestManifestArgsParse(t *testing.T) {
	for _, dir := range entryPoints {
		for _, w := range workloads(t, render(t, dir)) {
			for _, c := range w.Pod.Containers {
				t.Run(dir+"/"+w.Name+"/"+c.Name, func(t *testing.T) {
					bin := binary(t, strings.TrimPrefix(c.Command[0], "/"))
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					args := append(append(append([]string(nil), c.Command[1:]...), c.Args...), "--version")
					out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
					if err != nil {
						t.Fatalf("%s %s: %v\n%s", c.Command[0], strings.Join(args, " "), err, out)
					}
				})
			}
		}
	}
}
