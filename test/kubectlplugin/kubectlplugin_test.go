package kubectlplugin

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fencingv1alpha1 "fenceline.io/fenceline/api/fencing/v1alpha1"
	"fenceline.io/fenceline/pkg/cutoff"
	fencingclient "fenceline.io/fenceline/pkg/generated/clientset/versioned"
	"fenceline.io/fenceline/pkg/names"
	"fenceline.io/fenceline/test/cluster"
	"fenceline.io/fenceline/test/world"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestPluginGolden runs every command of the plugin, in order, against one
// scene and compares each output (stdout, stderr, exit code) with its
// golden file.
func TestPluginGolden(t *testing.T) {
	c := cluster.Start(t, cluster.Options{}) // skipped with -short, before the binary is needed
	bin, err := cluster.Binary("kubectl-fenceline")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	fences, err := (&world.World{Cluster: c}).InstallFencingCRDs(ctx)
	if err != nil {
		t.Fatalf("installing the fencing CRDs: %v", err)
	}
	s := &scene{t: t, ctx: ctx, kube: c.Client(), fences: fences, start: time.Now()}
	s.write()
	admin := c.AdminKubeconfig()
	// A user with no rights, and one who may read what fence reads but not
	// create a FencingRequest.
	_, nobody := c.ServiceAccountConfig(t, "ops", "nobody")
	_, reader := c.ServiceAccountConfig(t, "ops", "reader")
	s.grantFenceReads("ops", "reader")
	// An operator with the rights the plugin's docs list for fence and
	// unfence, none on Nodes: the asks need none.
	_, operator := c.ServiceAccountConfig(t, "ops", "operator")
	s.grantFenceAsks("ops", "operator")

	type step struct {
		golden     string
		kubeconfig string
		args       []string
	}
	runSteps := func(steps ...step) {
		for _, st := range steps {
			out := runPlugin(t, ctx, bin, st.kubeconfig, st.args...)
			compare(t, st.golden, normalize(out, tables(st.args)))
		}
	}
	runSteps(
		step{"status.golden", admin, []string{"status"}},
		step{"status-wide.golden", admin, []string{"status", "-o", "wide"}},
		step{"explain-dead.golden", admin, []string{"explain", "dead"}},
		step{"explain-quarantined.golden", admin, []string{"explain", "quarantined"}},
		step{"fence-live.golden", admin, []string{"fence", "live", "--yes", "--requester", "alice", "--wait=false"}},
		step{"fence-live-again.golden", admin, []string{"fence", "live", "--yes"}},
		step{"fence-unknown.golden", admin, []string{"fence", "ghost", "--yes"}},
		step{"fence-kept.golden", admin, []string{"fence", "kept", "--yes"}},
		step{"unfence-dead.golden", admin, []string{"unfence", "dead", "--yes"}},
		step{"unfence-kept.golden", admin, []string{"unfence", "kept", "--yes"}},
		step{"unfence-orphan-unverified.golden", admin, []string{"unfence", "orphan", "--yes"}},
		step{"explain-back.golden", admin, []string{"explain", "back"}},
	)
	// The asks of unfence are carried out by node-fencing: the plugin
	// waits for it. live's request is not admitted yet, so the ask
	// cancels it: node-fencing starts only once the ask is on it, or it
	// would admit the request first (a manual request is approved).
	liveArgs := []string{"unfence", "live", "--yes", "--timeout", "1m"}
	type result struct {
		out string
		err error
	}
	live := make(chan result, 1)
	go func() {
		out, err := pluginOutput(ctx, bin, operator, liveArgs...)
		live <- result{out, err}
	}()
	s.waitRequestAnnotated("live", names.UnfenceAnnotation)
	stop := s.runNodeFencing("live", "back", "kept", "orphan", "quarantined")
	r := <-live
	if r.err != nil {
		t.Fatal(r.err)
	}
	compare(t, "unfence-live.golden", normalize(r.out, true))
	runSteps(
		step{"unfence-back.golden", operator, []string{"unfence", "back", "--yes", "--requester", "alice", "--timeout", "1m"}},
		// The marks of a deleted request: the ask goes on the Node.
		step{"unfence-orphan.golden", admin, []string{"unfence", "orphan", "--yes", "--requester", "alice", "--verified", "rebooted", "--timeout", "1m"}},
	)
	// node-fencing notes on dead-req why the fenced node stays fenced: wait
	// for it, so that the status below does not depend on timing.
	s.waitRequestCondition("dead-req", fencingv1alpha1.FencingRequestRecovered)
	stop()
	runSteps(
		step{"status-json.golden", admin, []string{"status", "-o", "json"}},
		step{"status-no-rights.golden", nobody, []string{"status"}},
		step{"fence-no-create.golden", reader, []string{"fence", "live", "--yes"}},
	)
	checkWrites(t, ctx, c.Client(), fences)
}

// tables reports whether the plugin prints tables for args: with no -o,
// or -o wide.
func tables(args []string) bool {
	i := slices.Index(args, "-o")
	return i < 0 || (i+1 < len(args) && args[i+1] == "wide")
}

// runPlugin runs the binary and returns its output and exit status as one
// text.
func runPlugin(t *testing.T, ctx context.Context, bin, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := pluginOutput(ctx, bin, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pluginOutput is runPlugin for a goroutine: an error instead of a fatal
// test failure when the binary cannot run.
func pluginOutput(ctx context.Context, bin, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return "", fmt.Errorf("running kubectl-fenceline %v: %w", args, err)
	}
	return fmt.Sprintf("$ kubectl fenceline %s\n%s--- stderr\n%s--- exit %d\n", strings.Join(args, " "), stdout.String(), stderr.String(), code), nil
}

// normalizers replace what differs between runs: times, ages, UIDs and
// generated names. Tables are re-aligned afterwards, since an age's width
// varies.
var normalizers = []struct {
	re  *regexp.Regexp
	new string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<uid>"},
	{regexp.MustCompile(`\blive-[a-z0-9]{5}\b`), "live-<id>"},
	{regexp.MustCompile(`(^|\s)(\d+[smhd])+(\s|$)`), "$1<age>$3"},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ms|s|m)\b ago`), "<age> ago"},
	{regexp.MustCompile(`(Ready for )\d+s`), "$1<age>"},
	{regexp.MustCompile(`\bfor \d+m?\d*s\b`), "for <age>"},
}

// normalize applies the normalizers and, for tables, aligns the columns
// again.
func normalize(s string, table bool) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		for _, n := range normalizers {
			// Ages may be adjacent (two columns): apply until stable.
			for prev := ""; prev != l; {
				prev, l = l, n.re.ReplaceAllString(l, n.new)
			}
		}
		lines[i] = l
	}
	if !table {
		return strings.Join(lines, "\n")
	}
	return realign(lines)
}

var columnGap = regexp.MustCompile(`\S\s{2,}`)

// realign aligns every run of indented table lines, whose cells are
// separated by two spaces or more, as the plugin's tabwriter does.
func realign(lines []string) string {
	var out bytes.Buffer
	var w *tabwriter.Writer
	for _, l := range lines {
		if !strings.HasPrefix(l, "  ") {
			if w != nil {
				_ = w.Flush()
				w = nil
			}
			out.WriteString(l + "\n")
			continue
		}
		if w == nil {
			w = tabwriter.NewWriter(&out, 0, 8, 2, ' ', 0)
		}
		cells := columnGap.ReplaceAllStringFunc(strings.TrimSpace(l), func(m string) string { return m[:1] + "\t" })
		fmt.Fprintln(w, "  "+cells)
	}
	if w != nil {
		_ = w.Flush()
	}
	return strings.TrimSuffix(out.String(), "\n")
}

func compare(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run with -update to create it): %v", path, err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// checkWrites checks, beside the golden output, what the asks did, as
// node-fencing carried them out: live's manual request was cancelled and
// back was unfenced (its fencing conditions False, no fencing or
// out-of-service taint, its request Recovered and carrying the ask), and
// orphan's marks were cleared.
func checkWrites(t *testing.T, ctx context.Context, kube kubernetes.Interface, fences fencingclient.Interface) {
	t.Helper()
	reqs, err := fences.FencingV1alpha1().FencingRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]fencingv1alpha1.FencingPhase{}
	for _, r := range reqs.Items {
		phases[r.Spec.NodeName] = r.Status.Phase
		if r.Spec.NodeName == "back" && r.Annotations[names.UnfenceAnnotation] != "user:alice" {
			t.Errorf("back-req annotations %v, want the ask of user:alice", r.Annotations)
		}
	}
	want := map[string]fencingv1alpha1.FencingPhase{"dead": fencingv1alpha1.FencingPhaseFenced, "live": fencingv1alpha1.FencingPhaseCancelled, "back": fencingv1alpha1.FencingPhaseRecovered}
	if len(reqs.Items) != len(want) || !maps.Equal(phases, want) {
		t.Errorf("FencingRequests by node and phase: %v, want %v", phases, want)
	}
	orphan, err := kube.CoreV1().Nodes().Get(ctx, "orphan", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fencingTaint(orphan) || orphan.Annotations[names.UnfenceAnnotation] != "" {
		t.Errorf("node orphan after unfence: taints %v, annotations %v; want no fencing taint and the ask consumed", orphan.Spec.Taints, orphan.Annotations)
	}
	back, err := kube.CoreV1().Nodes().Get(ctx, "back", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fencingTaint(back) || cutoff.FencingComplete(back) || back.Annotations[names.OutOfServiceOwnerAnnotation] != "" {
		t.Errorf("node back after unfence: taints %v, conditions %v, annotations %v; want it unfenced", back.Spec.Taints, back.Status.Conditions, back.Annotations)
	}
}

// fencingTaint reports whether the node has a fencing or out-of-service
// taint.
func fencingTaint(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == names.OutOfServiceTaint || t.Key == names.FencingRequiredTaint || t.Key == names.FencingTriagedTaint
	})
}
