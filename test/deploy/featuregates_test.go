package deploy

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"fenceline.io/fenceline/test/cluster"
)

// upstreamGateLine matches one gate in upstream's --help, e.g.
// "WatchList=true|false (BETA - default=true)".
var upstreamGateLine = regexp.MustCompile(`^\s+([A-Za-z0-9]+)=true\|false \(([A-Z]+) - default=(true|false)\)`)

// hiddenUpstreamGates are gates upstream accepts but does not list (GA
// gates are left out of --help), with upstream's default.
var hiddenUpstreamGates = map[string]string{"MutableCSINodeAllocatableCount": "true"}

// TestUpstreamFeatureGatesAccepted: every feature gate the upstream
// external-attacher accepts (read from its --help, plus the GA ones it hides)
// set on an upstream command line must not stop fenceline-attacher before
// it starts; otherwise swapping the image would crash-loop. Both binaries
// run with the same flags and must get as far as loading the kubeconfig.
func TestUpstreamFeatureGatesAccepted(t *testing.T) {
	ours := binary(t, "fenceline-attacher")
	upstream, err := cluster.Tool("csi-attacher")
	if err != nil {
		if testing.Short() {
			t.Skipf("skipping under -short: %v", err)
		}
		t.Fatal(err)
	}
	help, _ := exec.Command(upstream, "--help").CombinedOutput()
	gates := map[string]string{}
	for _, line := range strings.Split(string(help), "\n") {
		if m := upstreamGateLine.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], "All") {
			gates[m[1]] = m[3]
		}
	}
	if len(gates) < 10 || gates["ReleaseLeaderElectionOnExit"] != "false" {
		t.Fatalf("read %d gates from upstream's --help (ReleaseLeaderElectionOnExit=%q); the format changed?\n%s", len(gates), gates["ReleaseLeaderElectionOnExit"], help)
	}
	for name, def := range hiddenUpstreamGates {
		gates[name] = def
	}
	// Each gate alone, set against its default (the value a user would
	// write down), and all of them at their defaults together.
	var all []string
	for name, def := range gates {
		all = append(all, name+"="+def)
		flip := map[string]string{"true": "false", "false": "true"}[def]
		t.Run(name, func(t *testing.T) { bothStart(t, ours, upstream, name+"="+flip) })
	}
	t.Run("all at their defaults", func(t *testing.T) { bothStart(t, ours, upstream, strings.Join(all, ",")) })
}

// bothStart runs both binaries with --feature-gates=gates and a kubeconfig
// that does not exist: each must fail on the kubeconfig, that is after
// accepting its flags.
func bothStart(t *testing.T, ours, upstream, gates string) {
	t.Helper()
	for _, bin := range []string{upstream, ours} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, _ := exec.CommandContext(ctx, bin, "--feature-gates="+gates, "--csi-address=/nonexistent/csi.sock",
			"--kubeconfig=/nonexistent/kubeconfig").CombinedOutput()
		cancel()
		if !strings.Contains(string(out), "/nonexistent/kubeconfig") {
			t.Errorf("%s --feature-gates=%s stopped before loading its kubeconfig:\n%s", bin, gates, out)
		}
	}
}
